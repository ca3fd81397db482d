package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tenure-io/tenure/election"
)

// exitError carries a child's exit status out of run.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("the command exited with status %d", e.code) }

func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "run --lock URL [flags] -- CMD [ARGS...]\n\n"+
		"Runs CMD only while this member leads. When leadership ends, CMD gets SIGTERM, then SIGKILL\n"+
		"after --grace, before any other member can take the lock. CMD is started again when this\n"+
		"member is elected again. CMD sees its term in TENURE_TERM. If CMD exits by itself, run\n"+
		"releases the lock and exits with CMD's status.")
	ef := addElectFlags(fs)
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

	cfg, st, err := ef.config(ctx, e, nil)
	if err != nil {
		return err
	}
	defer st.Close()
	log := cfg.Logger

	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var (
		mu       sync.Mutex
		exitCode = -1
		el       *election.Elector
	)
	cfg.OnStartedLeading = func(lctx context.Context) {
		term, _ := election.TermOf(lctx)
		cmd := exec.Command(cmdArgs[0], cmdArgs[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, e.stdout, e.stderr
		cmd.Env = append(os.Environ(), "TENURE_TERM="+strconv.FormatUint(term, 10), "TENURE_SERVER_ID="+cfg.ServerID)
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			log.Error("starting the command failed; stepping down", "err", err)
			mu.Lock()
			exitCode = 127
			mu.Unlock()
			stop()
			return
		}
		log.Info("leading: started the command", "term", term, "pid", cmd.Process.Pid)
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		select {
		case err := <-exited:
			code := exitStatus(err)
			log.Info("the command exited; stepping down", "status", code)
			mu.Lock()
			exitCode = code
			mu.Unlock()
			stop()
			return
		case <-lctx.Done():
		}
		// Leadership is ending: stop the command before the lease can lapse.
		log.Info("leadership ending: sending SIGTERM", "pid", cmd.Process.Pid, "grace", *grace)
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		t := time.NewTimer(*grace)
		defer t.Stop()
		select {
		case <-exited:
		case <-t.C:
			log.Warn("the command outlived its grace period: sending SIGKILL", "pid", cmd.Process.Pid)
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		log.Info("the command has stopped", "term", term)
	}
	el, err = election.New(ctx, cfg)
	if err != nil {
		return err
	}
	if err := el.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	mu.Lock()
	defer mu.Unlock()
	if exitCode > 0 {
		return exitError{exitCode}
	}
	return nil
}

func exitStatus(err error) int {
	if err == nil {
		return 0
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	}
	return 1
}
