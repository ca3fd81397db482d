package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"

	"github.com/tenure-io/tenure/election"
	"github.com/tenure-io/tenure/internal/opsserver"
	"github.com/tenure-io/tenure/internal/supervise"
)

// exitError carries a child's exit status out of run.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("the command exited with status %d", e.code) }

func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "run --lock URL [flags] -- CMD [ARGS...]\n\n"+
		"Runs CMD only while this member leads. When leadership ends, CMD's process group gets SIGTERM,\n"+
		"then SIGKILL after --grace, and CMD is dead before any other member can take the lock. CMD is\n"+
		"started again when this member is elected again. CMD sees its term in TENURE_TERM.\n\n"+
		"Signals: SIGHUP, SIGUSR1, SIGUSR2 and SIGWINCH are forwarded to CMD. SIGTERM, SIGINT and SIGQUIT\n"+
		"end leadership cleanly: CMD is stopped as above, then the lock is released. If tenure run dies\n"+
		"(SIGKILL), CMD gets SIGKILL (Linux). From a terminal, CMD runs in the foreground and can read it.\n\n"+
		"Exit status: if CMD exits by itself, run releases the lock and exits with CMD's status; if run\n"+
		"is stopped while CMD runs, it exits with CMD's status once CMD has stopped; 128+N means CMD died\n"+
		"of signal N. Stopped while not leading, run exits 0.\n\n"+
		"--http serves /livez, /readyz (200 while this member leads or follows a known leader, else 503\n"+
		"with the reason), /status and /metrics, as tenure elect does.")
	ef := addElectFlags(fs)
	httpAddr := fs.String("http", "", "serve /livez, /readyz (200 while this member leads or follows a known leader), /status and /metrics here")
	grace := fs.Duration("grace", 0, "time between SIGTERM and SIGKILL (default: half of leader-timeout minus renew-deadline)")
	var cmdArgs []string
	for i, a := range args {
		if a == "--" {
			cmdArgs = args[i+1:]
			args = args[:i]
			break
		}
	}
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 || len(cmdArgs) == 0 {
		fmt.Fprintln(e.stderr, "tenure run: the command to run goes after --")
		fs.Usage()
		return errUsage
	}
	margin := *ef.timeout - *ef.deadline
	if *grace == 0 {
		*grace = margin / 2
	}
	if *grace <= 0 || *grace >= margin {
		return fmt.Errorf("--grace %v must be positive and below leader-timeout minus renew-deadline (%v), so that the command is dead before another member can take the lock", *grace, margin)
	}

	cfg, storeURL, err := ef.config(e)
	if err != nil {
		return err
	}
	log := cfg.Logger
	warnDeprecated(fs, log)
	if err := ef.checkPeerListen(&cfg); err != nil {
		return err
	}

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	metrics := newElectMetrics()
	ops := opsserver.NewState("run", cfg.ServerID)
	defer context.AfterFunc(ctx, func() { ops.SetStopping() })()
	if *httpAddr != "" {
		stopHTTP, err := serveOps(*httpAddr, opsserver.Mux(ops.Status, metrics.reg), log)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	var (
		mu       sync.Mutex
		exitCode = -1
		child    *os.Process // the running command, for forwarded signals
	)
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, append(supervise.ForwardedSignals(), supervise.StopSignals()...)...)
	defer signal.Stop(sigs)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case sig := <-sigs:
				if slices.Contains(supervise.StopSignals(), sig) {
					log.Info("stopping: leadership ends once the command has stopped", "signal", sig)
					stop()
					continue
				}
				mu.Lock()
				if child != nil {
					_ = child.Signal(sig)
				}
				mu.Unlock()
			}
		}
	})

	st, err := openStore(ctx, log, ops, storeURL, metrics.store.Observe)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Close()
	cfg.Store, cfg.SkipProbe, cfg.Registerer = st, true, metrics.reg
	cfg.OnStartedLeading = func(lctx context.Context) {
		term, _ := election.TermOf(lctx)
		cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
		cmd.Env = append(os.Environ(), "TENURE_TERM="+strconv.FormatUint(term, 10), "TENURE_SERVER_ID="+cfg.ServerID)
		lead := &supervise.Lead{Cmd: cmd, Terminal: e.stdin == nil && supervise.ForegroundTerminal(), Grace: *grace, Term: term, Log: log,
			Started: func(p *os.Process) {
				mu.Lock()
				child = p
				mu.Unlock()
			}}
		code, exited, err := lead.Run(lctx)
		switch {
		case err != nil:
			log.Error("starting the command failed; stepping down", "err", err)
			mu.Lock()
			exitCode = 127
			mu.Unlock()
			stop()
		case exited:
			log.Info("the command exited; stepping down", "status", code)
			mu.Lock()
			exitCode = code
			mu.Unlock()
			stop()
		case ctx.Err() != nil:
			// tenure run is stopping, not just losing leadership: it
			// exits with the command's status.
			mu.Lock()
			exitCode = code
			mu.Unlock()
		}
	}
	member, err := election.New(ctx, cfg)
	if err != nil {
		return err
	}
	ops.Running(electionView(member))
	if err := member.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if exitCode > 0 {
		return exitError{exitCode}
	}
	return nil
}
