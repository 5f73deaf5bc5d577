//go:build !unix

package doctest

import (
	"errors"
	"os/exec"
)

// group does nothing here: there are no process groups to end.
func group(*exec.Cmd) {}

func kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}

func terminate(*exec.Cmd) error {
	return errors.New("doctest: no SIGTERM on this system")
}
