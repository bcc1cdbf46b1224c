package main

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestReadCPUOfItself(t *testing.T) {
	got, err := readCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if got.Self < 0 || got.Children < 0 {
		t.Errorf("readCPU(self) = %+v", got)
	}
	if _, err := readCPU(-1); err == nil {
		t.Error("readCPU(-1): no error")
	}
}

const exposition = `# HELP apiserver_request_total Counter of apiserver requests.
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="kubevirt.io",resource="virtualmachineinstances",scope="resource",subresource="",verb="POST",version="v1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="kubevirt.io",resource="virtualmachines",scope="resource",subresource="status",verb="PUT",version="v1"} 12
apiserver_request_total{code="409",component="apiserver",dry_run="",group="kubevirt.io",resource="virtualmachines",scope="resource",subresource="status",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="pods",scope="namespace",subresource="",verb="LIST",version="v1"} 1e+01
apiserver_request_duration_seconds_bucket{le="0.1",verb="GET"} 99
etcd_mvcc_db_total_size_in_bytes 2.1856256e+07
`

func TestParseMetrics(t *testing.T) {
	ss, err := parseMetrics(exposition, "apiserver_request_total", "etcd_mvcc_db_total_size_in_bytes")
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 5 {
		t.Fatalf("got %d samples, want 5 (the histogram is not asked for)", len(ss))
	}
	if v, ok := gauge(ss, "etcd_mvcc_db_total_size_in_bytes"); !ok || v != 21856256 {
		t.Errorf("etcd size = %v, %v", v, ok)
	}
	c := requestCounts(ss)
	want := map[string]float64{"POST virtualmachineinstances": 7, "PUT virtualmachines/status": 15, "LIST pods": 10}
	for k, v := range want {
		if c[k] != v {
			t.Errorf("count %q = %v, want %v (all: %v)", k, c[k], v, c)
		}
	}
	rates := requestRates(map[string]float64{"PUT virtualmachines/status": 5}, c, 10)
	if rates[0].Key != "LIST pods" && rates[0].Key != "PUT virtualmachines/status" || rates[0].PerSec != 1 {
		t.Errorf("largest rate first: got %+v", rates)
	}
	all, writes := totals(rates)
	if math.Abs(all-2.7) > 1e-9 || math.Abs(writes-1.7) > 1e-9 {
		t.Errorf("totals = %v all, %v writes; want 2.7 and 1.7", all, writes)
	}
	if _, err := parseMetrics(`apiserver_request_total{verb="GET" 1`, "apiserver_request_total"); err == nil {
		t.Error("unclosed labels: no error")
	}
	if _, err := parseMetrics(`apiserver_request_total{verb="a,b"} x`, "apiserver_request_total"); err == nil {
		t.Error("bad value: no error")
	}
}

func TestQuantilesAndSpread(t *testing.T) {
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	q := quantilesOf(ds)
	if q.P50 != 50*time.Millisecond || q.P99 != 99*time.Millisecond || q.Max != 100*time.Millisecond || q.N != 100 {
		t.Errorf("quantiles = %+v", q)
	}
	start := time.Unix(1000, 0)
	var even, herd []time.Time
	for i := range 60 {
		even = append(even, start.Add(time.Duration(i)*time.Second))
		herd = append(herd, start.Add(time.Duration(i%3)*time.Millisecond))
	}
	if sp := spreadOf(even, start, start.Add(time.Minute), 10*time.Second); sp.CV != 0 || sp.Peak != 10 {
		t.Errorf("even retries: CV %v, peak %d; want 0 and 10", sp.CV, sp.Peak)
	}
	sp := spreadOf(herd, start, start.Add(time.Minute), 10*time.Second)
	if sp.Peak != 60 || math.Abs(sp.CV-math.Sqrt(5)) > 1e-9 {
		t.Errorf("herd retries: CV %v, peak %d; want sqrt(5) and 60", sp.CV, sp.Peak)
	}
}

func TestCountSwapCloses(t *testing.T) {
	var buf bytes.Buffer
	for _, name := range []string{".default_vm-1.json.swap", "default_vm-1.json", ".default_vm-2.json.swap"} {
		padded := make([]byte, 32)
		copy(padded, name)
		_ = binary.Write(&buf, binary.LittleEndian, unix.InotifyEvent{Wd: 1, Mask: unix.IN_CLOSE_WRITE, Len: uint32(len(padded))})
		buf.Write(padded)
	}
	if n := countSwapCloses(buf.Bytes()); n != 2 {
		t.Errorf("countSwapCloses = %d, want 2", n)
	}
}

func TestTablesAndPlot(t *testing.T) {
	start := time.Unix(0, 0)
	rs := []result{
		{Controller: "ours", VMs: 50, Duration: 10 * time.Minute, Writes: 1.5, VMIs: 300},
		{Controller: "kubevirt", VMs: 50, Duration: 10 * time.Minute, Requests: 40, Writes: 30, EtcdGrowthBytes: 3 << 20,
			Rates: []rate{{"PUT virtualmachines/status", 10}}, CPU: []cpuDelta{{Name: "etcd", Self: 4}, {Name: "clusterlite", Self: 2, Children: 1}}},
		{Controller: "kubevirt", VMs: 100, Duration: 10 * time.Minute, Requests: 80},
	}
	rs[1].Retries = []retry{{Planned: start, Actual: start.Add(900 * time.Millisecond)}}
	rs[1].finish(start, start.Add(time.Minute))
	var md strings.Builder
	writeHerdTable(&md, rs)
	for _, want := range []string{"| 50 | kubevirt | 10.0 |", "900 ms", "3.0 MiB", "none (no API server)", "PUT virtualmachines/status 10.00", "clusterlite 2.0 + its reaped children (launchers) 1.0"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("herd table lacks %q:\n%s", want, md.String())
		}
	}
	var svg strings.Builder
	if err := writeHerdPlot(&svg, rs); err != nil {
		t.Fatal(err)
	}
	if s := svg.String(); !strings.HasPrefix(s, "<svg") || !strings.Contains(s, "kubevirt p99") || !strings.Contains(s, "ours writes") {
		t.Errorf("plot:\n%s", s)
	}
	var storm strings.Builder
	writeStormTable(&storm, []result{{Controller: "kubevirt", VMs: 2, Duration: 2 * time.Minute, VMIs: 22, Pods: 22, CrashLoop: false}})
	if !strings.Contains(storm.String(), "| kubevirt | 2 | 2.0 | 11.0 | 11.0 | 5.00 |") {
		t.Errorf("storm table:\n%s", storm.String())
	}
}

func TestParseFlags(t *testing.T) {
	for _, bad := range [][]string{{"-vms", "50 x"}, {"-vms", "0"}, {"-controllers", "kubevirt,theirs"}, {"-scenario", "flood"}, {"-minutes", "0"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q): no error", bad)
		}
	}
	o, err := parseFlags([]string{"-vms", "50,100 200"})
	if err != nil || len(o.vms) != 3 || o.vms[2] != 200 {
		t.Errorf("parseFlags: %+v, %v", o.vms, err)
	}
}

func TestSaveResultAddsUp(t *testing.T) {
	o := options{scenario: "herd", out: t.TempDir()}
	for _, r := range []result{{Controller: "kubevirt", VMs: 50, Duration: time.Minute, Requests: 12.5}, {Controller: "ours", VMs: 100, Duration: time.Minute}} {
		if err := saveResult(o, r); err != nil {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(filepath.Join(o.out, "herd.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "| 50 | kubevirt |") || !strings.Contains(string(data), "| 100 | ours |") || !strings.Contains(string(data), "12.50") {
		t.Errorf("herd.md does not hold both runs:\n%s", data)
	}
}

func TestCheckSmoke(t *testing.T) {
	ok := result{Controller: "ours", VMs: 5, Failures: 10, Retries: []retry{{}}}
	if err := checkSmoke([]result{ok}); err != nil {
		t.Errorf("a run with retries: %v", err)
	}
	noRetry := result{Controller: "ours", VMs: 5, Failures: 5}
	noMetrics := result{Controller: "kubevirt", VMs: 5, Failures: 5, Retries: []retry{{}}}
	for _, bad := range []result{noRetry, noMetrics} {
		if err := checkSmoke([]result{ok, bad}); err == nil {
			t.Errorf("checkSmoke(%+v): no error", bad)
		}
	}
}
