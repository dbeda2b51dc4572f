package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pgrun/pgrun"
)

func init() { commands = append(commands, newWorkflowCmd) }

func newWorkflowCmd(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workflow", Short: "Define, start, watch and steer DAG workflows"}
	var name string
	define := &cobra.Command{
		Use:   "define FILE.json",
		Short: `Check and store a workflow ({"name": ..., "nodes": [...]}); prints its version`,
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			raw, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			var spec map[string]json.RawMessage
			if err := json.Unmarshal(raw, &spec); err != nil {
				return fmt.Errorf("%s is not a JSON object: %v", args[0], err)
			}
			wf := name
			if wf == "" && spec["name"] != nil {
				_ = json.Unmarshal(spec["name"], &wf)
			}
			if wf == "" {
				wf = strings.TrimSuffix(filepath.Base(args[0]), filepath.Ext(args[0]))
			}
			delete(spec, "name")
			v, err := c.DefineWorkflow(cmd.Context(), wf, spec)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "workflow %s version %d\n", wf, v)
			return nil
		}),
	}
	define.Flags().StringVar(&name, "name", "", "workflow name (default: the file's \"name\", else its base name)")

	var (
		uniqueKey  string
		quietStart bool
	)
	start := &cobra.Command{
		Use:   "start NAME [INPUT_JSON]",
		Short: "Start a run of a workflow's newest version",
		Args:  cobra.RangeArgs(1, 2),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			input := json.RawMessage("{}")
			if len(args) == 2 {
				input = json.RawMessage(args[1])
				if !json.Valid(input) {
					return fmt.Errorf("input %q is not valid JSON", args[1])
				}
			}
			r, err := c.StartRun(cmd.Context(), args[0], input, uniqueKey)
			if err != nil {
				return err
			}
			if quietStart {
				fmt.Fprintln(cmd.OutOrStdout(), r.ID)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %d of %s v%d %s\n", r.ID, r.Workflow, r.Version, r.Status)
			return nil
		}),
	}
	start.Flags().StringVar(&uniqueKey, "unique-key", "", "return the running run holding this key instead of starting another")
	start.Flags().BoolVarP(&quietStart, "quiet", "q", false, "print only the run's id (for a script: run=$(runner workflow start ... -q))")

	status := &cobra.Command{
		Use:   "status RUN",
		Short: "Draw a run's DAG with each node's state",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			return drawRun(cmd, c, id)
		}),
	}

	var reason string
	cancel := &cobra.Command{
		Use:   "cancel RUN",
		Short: "Cancel a run and every unfinished node",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			r, err := c.CancelRun(cmd.Context(), id, reason)
			switch {
			case errors.Is(err, pgrun.ErrRunNotFound):
				return fmt.Errorf("run %d does not exist", id)
			case errors.Is(err, pgrun.ErrFinished):
				return fmt.Errorf("run %d already ended %s", id, r.Status)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %d cancelled\n", id)
			return nil
		}),
	}
	cancel.Flags().StringVar(&reason, "reason", "", "why, for the nodes' events")

	input := &cobra.Command{
		Use:   "input RUN NODE JSON",
		Short: "Submit the payload an input node waits for (kept if the node is not reached yet)",
		Args:  cobra.ExactArgs(3),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			if !json.Valid([]byte(args[2])) {
				return fmt.Errorf("payload %q is not valid JSON", args[2])
			}
			now, err := c.SubmitInput(cmd.Context(), id, args[1], json.RawMessage(args[2]))
			if errors.Is(err, pgrun.ErrRunNotFound) {
				return fmt.Errorf("run %d does not exist", id)
			}
			if err != nil {
				return err
			}
			if now {
				fmt.Fprintf(cmd.OutOrStdout(), "node %s of run %d took the input\n", args[1], id)
			} else {
				fmt.Fprintf(cmd.OutOrStdout(), "input kept: node %s of run %d will take it when reached\n", args[1], id)
			}
			return nil
		}),
	}
	retry := &cobra.Command{
		Use:   "retry RUN",
		Short: "Redrive a failed or cancelled run: its failed and cancelled nodes run again",
		Args:  cobra.ExactArgs(1),
		RunE: g.withClient(func(cmd *cobra.Command, args []string, c *pgrun.Client) error {
			id, err := parseRunID(args[0])
			if err != nil {
				return err
			}
			r, err := c.RetryRun(cmd.Context(), id)
			switch {
			case errors.Is(err, pgrun.ErrRunNotFound):
				return fmt.Errorf("run %d does not exist", id)
			case errors.Is(err, pgrun.ErrNotRetryable):
				return fmt.Errorf("run %d is %s: only failed and cancelled runs can be retried", id, r.Status)
			case err != nil:
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "run %d %s again\n", id, r.Status)
			return nil
		}),
	}
	cmd.AddCommand(define, start, status, input, cancel, retry)
	return cmd
}

func parseRunID(s string) (int64, error) {
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("run id %q is not a positive whole number", s)
	}
	return id, nil
}

// drawRun prints the run's DAG: nodes by depth (a node sits one level below its
// deepest dependency), each with its state and what it waits on.
func drawRun(cmd *cobra.Command, c *pgrun.Client, id int64) error {
	ctx := cmd.Context()
	r, err := c.GetRun(ctx, id)
	if errors.Is(err, pgrun.ErrRunNotFound) {
		return fmt.Errorf("run %d does not exist", id)
	}
	if err != nil {
		return err
	}
	nodes, err := c.RunNodes(ctx, id)
	if err != nil {
		return err
	}
	var spec struct {
		Nodes []struct {
			Name  string   `json:"name"`
			Deps  []string `json:"deps"`
			Input bool     `json:"input"`
		} `json:"nodes"`
	}
	wf, err := c.Workflow(ctx, r.Workflow, r.Version)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(wf.Spec, &spec); err != nil {
		return err
	}
	deps := map[string][]string{}
	input := map[string]bool{}
	level := map[string]int{}
	for _, n := range spec.Nodes { // nodes may be listed in any order: settle levels iteratively
		deps[n.Name], input[n.Name] = n.Deps, n.Input
	}
	for changed := true; changed; {
		changed = false
		for _, n := range spec.Nodes {
			l := 0
			for _, d := range n.Deps {
				l = max(l, level[d]+1)
			}
			if l != level[n.Name] {
				level[n.Name], changed = l, true
			}
		}
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "run %d  %s v%d  %s\n", r.ID, r.Workflow, r.Version, r.Status)
	tw := table(out)
	for l := 0; ; l++ {
		found := false
		for _, n := range nodes {
			if level[n.Node] != l {
				continue
			}
			found = true
			fmt.Fprintf(tw, "%s%s %s\t%s\t%s\n", strings.Repeat("   ", l), mark(n.Status), n.Node,
				nodeState(n, input[n.Node]), waitsOn(deps[n.Node]))
		}
		if !found {
			break
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.Output) > 0 {
		fmt.Fprintf(out, "output %s\n", compactJSON(r.Output))
	}
	if len(r.Error) > 0 {
		fmt.Fprintf(out, "error  %s\n", compactJSON(r.Error))
	}
	return nil
}

// mark is a one-character picture of a status.
func mark(s pgrun.JobStatus) string {
	switch s {
	case pgrun.StatusSucceeded:
		return "[x]"
	case pgrun.StatusFailed:
		return "[!]"
	case pgrun.StatusCancelled:
		return "[-]"
	case pgrun.StatusSkipped:
		return "[/]"
	case pgrun.StatusRunning, pgrun.StatusWaiting:
		return "[~]"
	}
	return "[ ]"
}

func nodeState(n pgrun.RunNode, isInput bool) string {
	s := string(n.Status)
	switch {
	case n.Status == pgrun.StatusPending && n.DepsRemaining > 0:
		s += fmt.Sprintf(" (%d deps left)", n.DepsRemaining)
	case n.Status == pgrun.StatusWaiting && isInput:
		s += " for input"
	case n.ProgressTotal != nil && !n.Status.Finished():
		s += " " + progressBar(n.ProgressCurrent, *n.ProgressTotal)
	}
	if n.ErrorClass != nil && n.Status != pgrun.StatusSucceeded {
		s += " (" + *n.ErrorClass + ")"
	}
	return s
}

func waitsOn(deps []string) string {
	if len(deps) == 0 {
		return ""
	}
	return "<- " + strings.Join(deps, ", ")
}
