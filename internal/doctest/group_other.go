//go:build !unix

package doctest

import "os/exec"

// group does nothing here: there are no process groups to end.
func group(*exec.Cmd) {}

func kill(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
