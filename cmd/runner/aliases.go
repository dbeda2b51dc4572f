package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() {
	commands = append(commands,
		hiddenAlias(newJobEnqueueCmd, "enqueue KIND [JSON]", "job enqueue"),
		hiddenAlias(newJobListCmd, "jobs", "job list"),
		hiddenAlias(newJobCancelCmd, "cancel ID", "job cancel"),
		hiddenAlias(newJobRetryCmd, "retry [ID]", "job retry"),
		hiddenAlias(newWorkerControlCmd, "control HOST QUEUE on|drain|off", "worker control"),
	)
}

// The verbs of the command line before it became a noun-verb tree (`runner enqueue`,
// `runner jobs`, `runner job ID`, `runner cancel ID`, `runner retry [ID]`, `runner
// control HOST QUEUE MODE`) keep working for the scripts that use them: each is the
// new command under its old name, with the same flags and output, hidden from help.
// (`runner queue pause|resume` did not change.)

// hiddenAlias returns a constructor of newCmd's command under the old use line,
// hidden from help and pointing to its new name.
func hiddenAlias(newCmd func(*globals) *cobra.Command, use, now string) func(*globals) *cobra.Command {
	return func(g *globals) *cobra.Command {
		cmd := newCmd(g)
		cmd.Use = use
		cmd.Hidden = true
		cmd.Short += fmt.Sprintf(" (old name of `runner %s`)", now)
		cmd.Example = strings.ReplaceAll(cmd.Example, "runner "+now, "runner "+strings.Fields(use)[0])
		return cmd
	}
}

// jobIDAlias is the RunE of `runner job`: `runner job ID` shows job ID as `runner job
// get ID` does. A word that looks like a misspelt subcommand is reported as one.
func jobIDAlias(g *globals) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		switch {
		case len(args) == 0:
			return fmt.Errorf("%q needs a subcommand: one of %s", cmd.CommandPath(), subcommandNames(cmd))
		case len(args) > 1:
			return fmt.Errorf("unknown command %q for %q: use one of %s", args[0], cmd.CommandPath(), subcommandNames(cmd))
		}
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			return fmt.Errorf("unknown command %q for %q: did you mean %s?", args[0], cmd.CommandPath(), strings.Join(s, " or "))
		}
		id, err := parseID(args[0])
		if err != nil {
			return err
		}
		return g.withClient(func(cmd *cobra.Command, _ []string, c *pgrun.Client) error {
			return showJob(cmd, c, id)
		})(cmd, args)
	}
}
