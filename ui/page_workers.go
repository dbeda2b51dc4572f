package ui

import (
	"html/template"
	"net/http"
	"slices"
	"time"

	"github.com/pgrun/pgrun/internal/sqlapi"
)

const (
	// workersShown bounds the workers list (live ones first).
	workersShown = 500
	// hostWindow is how much host telemetry the charts show (record_hw keeps an hour).
	hostWindow = 30 * time.Minute
)

// workerRow is one registered runner (sqlapi.DashboardWorkers).
type workerRow struct {
	ID            string     `db:"id" json:"id"`
	Host          string     `db:"host" json:"host"`
	PID           int        `db:"pid" json:"pid"`
	State         string     `db:"state" json:"state"`
	Queues        []string   `db:"queues" json:"queues"`
	Models        []string   `db:"models" json:"models"`
	Kinds         []string   `db:"kinds" json:"kinds"`
	Version       *string    `db:"version" json:"version"`
	StartedAt     time.Time  `db:"started_at" json:"started_at"`
	LastSeen      time.Time  `db:"last_seen" json:"last_seen"`
	SinceSeenSecs *float64   `db:"since_seen_secs" json:"since_seen_secs"`
	FlaggedDeadAt *time.Time `db:"flagged_dead_at" json:"flagged_dead_at"`
	Alive         bool       `db:"alive" json:"alive"`
	Running       int64      `db:"running" json:"running"`
	// Liveness is worker_status's verdict: live, stopped, or dead (silent past three
	// heartbeat cadences, or flagged), whether or not it held jobs when it went.
	Liveness string `db:"liveness" json:"liveness"`
}

// controlRow is one operator switch (pgrun.worker_control).
type controlRow struct {
	Host      string    `db:"host" json:"host"`
	Queue     string    `db:"queue" json:"queue"`
	Mode      string    `db:"mode" json:"mode"`
	UpdatedAt time.Time `db:"updated_at" json:"updated_at"`
}

// sampleRow is one hardware sample (sqlapi.DashboardHostSamples).
type sampleRow struct {
	Host        string    `db:"host" json:"-"`
	At          time.Time `db:"at" json:"at"`
	CPUPct      *float64  `db:"cpu_pct" json:"cpu_pct"`
	MemUsed     *int64    `db:"mem_used" json:"mem_used"`
	MemTotal    *int64    `db:"mem_total" json:"mem_total"`
	GPUCount    *int      `db:"gpu_count" json:"gpu_count"`
	GPUUtil     *float64  `db:"gpu_util" json:"gpu_util"`
	GPUMemUsed  *float64  `db:"gpu_mem_used" json:"gpu_mem_used"`
	GPUMemTotal *float64  `db:"gpu_mem_total" json:"gpu_mem_total"`
	GPUNames    *string   `db:"gpu_names" json:"gpu_names"`
}

// hostView is one host: its workers, its latest sample and its charts.
type hostView struct {
	Host    string        `json:"host"`
	Workers []workerRow   `json:"workers"`
	Latest  *sampleRow    `json:"latest,omitempty"`
	Samples int           `json:"samples"`
	CPU     template.HTML `json:"-"`
	GPU     template.HTML `json:"-"`
	Alive   int           `json:"alive"`
}

type workersData struct {
	Hosts    []hostView   `json:"hosts"`
	Control  []controlRow `json:"control"`
	Queues   []string     `json:"queues"` // for the control form
	Dead     int          `json:"dead"`
	Alive    int          `json:"alive"`
	Shown    int          `json:"shown"`
	Capped   bool         `json:"capped"`
	WindowTo time.Time    `json:"-"`
}

// workers shows runners by host with their heartbeats and dead flags, the hosts'
// telemetry, and the operator's switches per host and queue.
func (s *Server) workers(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var d workersData
	var problems []string
	ws, err := collect[workerRow](ctx, s.pool, sqlapi.DashboardWorkers, workersShown)
	if err != nil {
		problems = append(problems, problem("workers", err))
	}
	d.Shown, d.Capped = len(ws), len(ws) == workersShown
	if d.Control, err = collect[controlRow](ctx, s.pool, sqlapi.DashboardWorkerControl); err != nil {
		problems = append(problems, problem("worker control", err))
	}
	samples, err := collect[sampleRow](ctx, s.pool, sqlapi.DashboardHostSamples, hostWindow.Seconds())
	if err != nil {
		problems = append(problems, problem("host telemetry", err))
	}
	hosts := map[string]*hostView{}
	var order []string
	host := func(name string) *hostView {
		if h, ok := hosts[name]; ok {
			return h
		}
		hosts[name] = &hostView{Host: name}
		order = append(order, name)
		return hosts[name]
	}
	queues := map[string]bool{}
	for _, wk := range ws {
		h := host(wk.Host)
		h.Workers = append(h.Workers, wk)
		if wk.Alive {
			h.Alive++
			d.Alive++
		}
		if wk.Liveness == "dead" {
			d.Dead++
		}
		for _, q := range wk.Queues {
			queues[q] = true
		}
	}
	bySample := map[string][]sampleRow{}
	for _, sm := range samples {
		host(sm.Host)
		bySample[sm.Host] = append(bySample[sm.Host], sm)
	}
	to := time.Now()
	from := to.Add(-hostWindow)
	for _, name := range order {
		h := hosts[name]
		ss := bySample[name]
		h.Samples = len(ss)
		if len(ss) > 0 {
			h.Latest = &ss[len(ss)-1]
			h.CPU, h.GPU = hostCharts(ss, from, to)
		}
		d.Hosts = append(d.Hosts, *h)
	}
	for q := range queues {
		d.Queues = append(d.Queues, q)
	}
	slices.Sort(d.Queues)
	s.render(w, r, "workers", "Workers and hosts", d, problems...)
}

// hostCharts draws a host's CPU and memory use, and its GPUs' utilisation and
// memory when it has any, in percent over the window.
func hostCharts(ss []sampleRow, from, to time.Time) (cpu, gpu template.HTML) {
	c := series{Name: "CPU %", Class: "s1"}
	m := series{Name: "RAM %", Class: "s2"}
	gu := series{Name: "GPU util %", Class: "s3"}
	gm := series{Name: "GPU mem %", Class: "s4"}
	hasGPU := false
	for _, s := range ss {
		if s.CPUPct != nil {
			c.At, c.Val = append(c.At, s.At), append(c.Val, *s.CPUPct)
		}
		if s.MemUsed != nil && s.MemTotal != nil && *s.MemTotal > 0 {
			m.At, m.Val = append(m.At, s.At), append(m.Val, 100*float64(*s.MemUsed)/float64(*s.MemTotal))
		}
		if s.GPUCount != nil && *s.GPUCount > 0 {
			hasGPU = true
			if s.GPUUtil != nil {
				gu.At, gu.Val = append(gu.At, s.At), append(gu.Val, *s.GPUUtil)
			}
			if s.GPUMemUsed != nil && s.GPUMemTotal != nil && *s.GPUMemTotal > 0 {
				gm.At, gm.Val = append(gm.At, s.At), append(gm.Val, 100**s.GPUMemUsed / *s.GPUMemTotal)
			}
		}
	}
	cpu = lineChart("CPU and memory, last 30 minutes", from, to, 100, "100%", []series{c, m})
	if hasGPU {
		gpu = lineChart("GPU utilisation and memory, last 30 minutes", from, to, 100, "100%", []series{gu, gm})
	}
	return cpu, gpu
}
