package main

import (
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/pgrun/pgrun/internal/top"
)

func init() { commands = append(commands, newTopCmd) }

// onceWidth is --once's width when stdout is not a terminal: wide enough for every
// column of the queue table, narrow enough for a CI log.
const onceWidth = 160

// maxWidth bounds --width. A frame's lines are cut to the width and never padded,
// so a width past the longest line cuts nothing; ten thousand columns is past any
// terminal, and a larger number is a typo.
const maxWidth = 10000

// Bounds on --interval. The shortest is the floor top has had from the start. Past
// the longest, what sends no notification (completions, progress, heartbeats) would
// show over an hour stale in a view meant for watching: a slip of the unit.
const (
	minInterval = 200 * time.Millisecond
	maxInterval = time.Hour
)

// checkTopFlags refuses the flags of top that would be ignored or are out of range,
// before anything connects: --width only shapes --once's frame (the live view
// follows the terminal) and --interval only the live view. changed reports whether
// a flag was given.
func checkTopFlags(once bool, interval time.Duration, width int, changed func(string) bool) error {
	switch {
	case interval < minInterval:
		return fmt.Errorf("--interval %s is too short: use %s or more", interval, minInterval)
	case interval > maxInterval:
		return fmt.Errorf("--interval %s is too long: use %s or less", interval, maxInterval)
	case once && changed("interval"):
		return fmt.Errorf("--interval %s has no effect with --once, which prints one frame: drop one of them", interval)
	case changed("width") && !once:
		return fmt.Errorf("--width %d needs --once: the live view takes the terminal's width", width)
	case width < 0 || width > maxWidth:
		return fmt.Errorf("--width %d is not valid: give 1 to %d columns, or 0 for the terminal's width (else %d)", width, maxWidth, onceWidth)
	}
	return nil
}

func newTopCmd(g *globals) *cobra.Command {
	var (
		once     bool
		interval time.Duration
		width    int
	)
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch queues, throughput, running jobs with their progress, and workers, live",
		Long: `top draws a full-screen view that refreshes when the engine notifies (jobs
enqueued, cancelled, worker control, hardware samples; bursts are gathered into one
refresh) and every --interval for what sends no notification (completions, progress,
heartbeats). Per queue: jobs by state, the oldest due job's age, the live workers
serving it, and jobs finished per second over the last 10 seconds and the last minute;
queues whose due jobs no live worker serves, or whose kinds none handles, are flagged.
Then the running jobs, longest running first, with progress bars, and the workers:
live, dead (silent for three heartbeats) and stopped. q or Ctrl-C quits and gives the
terminal back. --once prints one frame and exits, for scripts.`,
		Example: "  runner top\n  runner top --interval 5s\n  runner top --once",
		Args:    cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			return checkTopFlags(once, interval, width, cmd.Flags().Changed)
		},
		RunE: g.withPool(func(cmd *cobra.Command, _ []string, pool *pgxpool.Pool) error {
			title := describeDatabase(pool)
			if once {
				w := width
				if w <= 0 {
					w = onceWidth
					if f, ok := cmd.OutOrStdout().(*os.File); ok {
						if cols, _, err := term.GetSize(int(f.Fd())); err == nil && cols > 0 {
							w = cols
						}
					}
				}
				return top.Once(cmd.Context(), pool, cmd.OutOrStdout(), w, title)
			}
			out, _ := cmd.OutOrStdout().(*os.File)
			return top.Run(cmd.Context(), top.Options{Pool: pool, Out: out, Title: title, Interval: interval})
		}),
	}
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit")
	cmd.Flags().DurationVar(&interval, "interval", top.DefaultInterval, fmt.Sprintf("without --once: refresh at least this often, %s to %s (notifications refresh sooner)", minInterval, maxInterval))
	cmd.Flags().IntVar(&width, "width", 0, fmt.Sprintf("with --once: columns, 1 to %d (default: the terminal's, else %d)", maxWidth, onceWidth))
	return cmd
}

// describeDatabase names the database watched, without its password:
// user@host:port/dbname.
func describeDatabase(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
