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
		PreRunE: func(*cobra.Command, []string) error {
			if interval < 200*time.Millisecond {
				return fmt.Errorf("--interval %s is too short: use 200ms or more", interval)
			}
			return nil
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
	cmd.Flags().DurationVar(&interval, "interval", top.DefaultInterval, "refresh at least this often (notifications refresh sooner)")
	cmd.Flags().IntVar(&width, "width", 0, "with --once: columns (default: the terminal's, else 160)")
	return cmd
}

// describeDatabase names the database watched, without its password:
// user@host:port/dbname.
func describeDatabase(pool *pgxpool.Pool) string {
	c := pool.Config().ConnConfig
	return fmt.Sprintf("%s@%s:%d/%s", c.User, c.Host, c.Port, c.Database)
}
