package loadgen

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
)

// WorkerJob is what a worker process reads from its standard input.
type WorkerJob struct {
	Spec    Spec `json:"spec"`
	Workers int  `json:"workers"`
}

// ExecLauncher starts each worker as a child process running path with args
// and this process's environment plus env;
// the child must call RunWorker with the WorkerJob it reads from stdin and
// write its reports to stdout. Its stderr is passed to stderr.
func ExecLauncher(path string, args, env []string, stderr io.Writer) Launcher {
	return func(ctx context.Context, spec Spec, workers int) (io.ReadCloser, func() error, error) {
		job, err := json.Marshal(WorkerJob{Spec: spec, Workers: workers})
		if err != nil {
			return nil, nil, fmt.Errorf("encode job: %w", err)
		}
		cmd := exec.Command(path, args...)
		cmd.Stderr = stderr
		cmd.Env = append(os.Environ(), env...)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("worker stdin: %w", err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, nil, fmt.Errorf("worker stdout: %w", err)
		}
		if err := cmd.Start(); err != nil {
			return nil, nil, fmt.Errorf("start %s: %w", path, err)
		}
		// Stop the worker early when the run is cancelled; it still reports.
		stop := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(os.Interrupt) })
		if _, err := stdin.Write(append(job, '\n')); err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return nil, nil, fmt.Errorf("send job to worker: %w", err)
		}
		_ = stdin.Close()
		wait := func() error {
			defer stop()
			if err := cmd.Wait(); err != nil {
				return fmt.Errorf("worker process: %w", err)
			}
			return nil
		}
		return stdout, wait, nil
	}
}

// ReadJob decodes a WorkerJob from r.
func ReadJob(r io.Reader) (WorkerJob, error) {
	var j WorkerJob
	if err := json.NewDecoder(r).Decode(&j); err != nil {
		return j, fmt.Errorf("read worker job: %w", err)
	}
	if j.Workers <= 0 || j.Spec.Conns < 0 {
		return j, fmt.Errorf("read worker job: bad job %+v", j)
	}
	return j, nil
}
