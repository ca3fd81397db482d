// Package rsmtest runs groups of rsm nodes inside one test process and
// breaks them on purpose, and checks what their clients saw with porcupine.
//
// # Cluster
//
// Start runs N hosts on loopback, each with its own listener, over one
// shared in-memory store:
//
//	c := rsmtest.Start(t, rsmtest.Config{Options: opts, Seed: seed,
//		Machines: func(i int) map[string]rsm.StateMachine {
//			return map[string]rsm.StateMachine{kv.MachineName: kv.New()}
//		}})
//	leader, err := c.WaitLeader(ctx)
//	c.Node(i).Command(ctx, kv.MachineName, cmd)
//
// Faults, each undone by its opposite or by HealAll:
//
//	c.Faults().AmbiguousRate(faultstore.Writes, 0.05) // the store, as every node sees it
//	c.NodeFaults(i).SetPartition(faultstore.Partitioned) // node i cut from the store
//	c.Partition(a, b); c.Isolate(a); c.Heal()          // the network between nodes
//	c.Pause(i, 0.5); c.Resume(i)                       // a stopped process (its links cut)
//	c.Stall(i, 0.5); c.Resume(i)                       // a stopped process (its links silent, open)
//	c.Crash(i); c.Restart(ctx, i)                      // a killed process, a fresh one
//
// Each host dials through a Dialer that consults the cluster's partition
// table: a cut link fails new dials and closes the connections across it.
// Crash closes the host after holding its store calls, so nothing it does
// while stopping reaches the store; Restart starts a new host with the
// same ID, fresh machines and a new port.
//
// # Linearizability
//
// History records operations with call and return times; an operation
// whose outcome is unknown returns at Pending. KVModel is a porcupine model
// of the kv machine (rsm/kv), partitioned by key, and CheckKVRevisions
// checks what crosses keys (one global revision counter). CheckKV runs
// both and, on a violation or a timeout, fails the test and writes the
// history as JSON and porcupine's HTML visualization under
// $TENURE_ARTIFACTS/<test> (or a new directory in the system's temporary
// directory, named in the failure).
//
// # What it does not do
//
// Runs are not reproducible: goroutines, timers and sockets are real, and
// a seed fixes only the sequence of fault draws of each store layer. A
// paused node's timers keep running, as rsmtest cannot stop goroutines;
// only its store calls and its network links are held. Crash is as abrupt
// as rsmtest can make it, not a kill: the host's Close runs. KVModel
// assumes every written value is unique and that a cas expects a revision
// its client read.
package rsmtest
