package top

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"golang.org/x/term"
)

// The ANSI sequences top uses, understood by every terminal emulator in use (and
// by tmux and screen): no terminfo lookup, no dependency.
const (
	altScreenOn  = "\033[?1049h" // a screen of its own, so the shell's comes back on exit
	altScreenOff = "\033[?1049l"
	cursorHide   = "\033[?25l"
	cursorShow   = "\033[?25h"
	home         = "\033[H"
	clearLine    = "\033[K" // to the end of the line
	clearBelow   = "\033[J" // to the end of the screen
)

// ErrNotATerminal is returned by Run when stdout is not a terminal.
var ErrNotATerminal = errors.New("runner top draws on a terminal, and stdout is not one: use --once to print one frame")

// screen is the terminal top draws on: its stdout for frames, and its own handle on
// /dev/tty for keys, in raw mode (each key at once, no echo). Keys come from our own
// open of /dev/tty, not from stdin: Go polls a file it opened itself, so closing it
// ends a pending read, and the shell's stdin is never switched to non-blocking.
type screen struct {
	out   *os.File
	outFd int
	tty   *os.File
	saved *term.State

	mu        sync.Mutex
	lastW     int
	lastH     int
	closed    bool
	closeOnce sync.Once
}

// openScreen switches the terminal to raw mode and to the alternate screen.
func openScreen(out *os.File) (*screen, error) {
	if out == nil || !term.IsTerminal(int(out.Fd())) {
		return nil, ErrNotATerminal
	}
	tty, err := os.OpenFile("/dev/tty", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("runner top reads keys from the terminal: %w", err)
	}
	s := &screen{out: out, outFd: int(out.Fd()), tty: tty}
	// SyscallConn, not Fd: Fd would switch the file back to blocking mode, and a
	// blocked read could then not be ended by Close.
	raw, err := tty.SyscallConn()
	if err == nil {
		cerr := raw.Control(func(fd uintptr) { s.saved, err = term.MakeRaw(int(fd)) })
		err = errors.Join(err, cerr)
	}
	if err != nil {
		tty.Close()
		return nil, fmt.Errorf("runner top: raw mode: %w", err)
	}
	fmt.Fprint(out, altScreenOn+cursorHide)
	return s, nil
}

// close gives the terminal back: the shell's screen, the cursor, cooked mode.
func (s *screen) close() {
	s.closeOnce.Do(func() {
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		fmt.Fprint(s.out, cursorShow+altScreenOff)
		if raw, err := s.tty.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) { _ = term.Restore(int(fd), s.saved) })
		}
		s.tty.Close() // ends readKeys' pending read
	})
}

// readKeys sends each byte typed to keys until the tty is closed or ctx is done.
func (s *screen) readKeys(ctx context.Context, keys chan<- byte) {
	buf := make([]byte, 64)
	for {
		n, err := s.tty.Read(buf)
		for _, b := range buf[:n] {
			select {
			case keys <- b:
			case <-ctx.Done():
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// size is the terminal's size (80x24 when it cannot tell).
func (s *screen) size() (int, int) {
	w, h, err := term.GetSize(s.outFd)
	if err != nil || w <= 0 || h <= 0 {
		return 80, 24
	}
	return w, h
}

// resized reports whether the size changed since the last frame.
func (s *screen) resized() bool {
	w, h := s.size()
	s.mu.Lock()
	defer s.mu.Unlock()
	return w != s.lastW || h != s.lastH
}

// draw paints lines from the top left, clearing what the previous frame left. In
// raw mode a newline does not return the carriage, so lines end in \r\n; the last
// has none, so that a full screen never scrolls.
func (s *screen) draw(lines []string) {
	w, h := s.size()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	s.lastW, s.lastH = w, h
	var b strings.Builder
	b.WriteString(home)
	for i, l := range lines {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString(l)
		b.WriteString(clearLine)
	}
	b.WriteString(clearBelow)
	_, _ = s.out.WriteString(b.String())
}
