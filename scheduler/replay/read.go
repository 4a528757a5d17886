package replay

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpushare/gpushare/api"
)

// OpenbCardUnits is an openb card's capacity: GPU share is counted in
// milli-GPU whatever the model.
const OpenbCardUnits = 1000

// Formats of trace files.
const (
	// FormatOpenb is Alibaba's cluster-trace-gpu-v2023 (openb) CSVs.
	// Nodes: sn,cpu_milli,memory_mib,gpu,model. Pods: name,cpu_milli,
	// memory_mib,num_gpu,gpu_milli[,gpu_spec,...]. A card is 1,000 units;
	// gpu_milli is the share of one card when num_gpu == 1; num_gpu > 1 asks
	// for that many whole cards; num_gpu == 0 is a CPU-only pod.
	FormatOpenb = "openb"
	// FormatMemory is gpushare's own format for memory workloads, the same
	// columns with GPU memory in GiB instead of milli-GPU:
	//
	//	nodes: name,cpu_milli,memory_mib,gpu,model,card_gib
	//	pods:  name,cpu_milli,memory_mib,num_gpu,gpu_gib[,gpu_spec]
	//
	// A node has gpu cards of card_gib GiB each. A pod with num_gpu == 1 asks
	// for gpu_gib GiB of one card, num_gpu > 1 for that many whole cards
	// (gpu_gib ignored), num_gpu == 0 for no GPU. gpu_spec is as in openb.
	// Example: "n1,32000,131072,2,T4,16" is a node with two 16 GiB T4s;
	// "p1,4000,8192,1,6," a pod asking for 6 GiB of any card.
	FormatMemory = "memory"
)

// LoadOpenb reads the openb cluster (openb_node_list_gpu_node.csv) and the
// pod list of one workload (e.g. "openb_pod_list_default") from dir.
func LoadOpenb(dir, workload string) (*Trace, error) {
	nodes, err := readFile(filepath.Join(dir, "openb_node_list_gpu_node.csv"), func(r io.Reader) ([]NodeSpec, error) { return ReadNodes(r, FormatOpenb) })
	if err != nil {
		return nil, err
	}
	pods, err := readFile(filepath.Join(dir, workload+".csv"), func(r io.Reader) ([]PodSpec, error) { return ReadPods(r, FormatOpenb) })
	if err != nil {
		return nil, err
	}
	t := &Trace{Name: workload, Nodes: nodes, Pods: pods, WholeCardUnits: OpenbCardUnits}
	return t, t.validate()
}

// LoadMemory reads a memory-format trace (see FormatMemory) from a node file
// and a pod file. The trace is named after the pod file.
func LoadMemory(nodeFile, podFile string) (*Trace, error) {
	nodes, err := readFile(nodeFile, func(r io.Reader) ([]NodeSpec, error) { return ReadNodes(r, FormatMemory) })
	if err != nil {
		return nil, err
	}
	pods, err := readFile(podFile, func(r io.Reader) ([]PodSpec, error) { return ReadPods(r, FormatMemory) })
	if err != nil {
		return nil, err
	}
	t := &Trace{Name: strings.TrimSuffix(filepath.Base(podFile), ".csv"), Unit: api.UnitGiB, Nodes: nodes, Pods: pods}
	if n := t.Cards(); n > 0 {
		t.WholeCardUnits = int64(math.Round(float64(t.Capacity()) / float64(n)))
	}
	return t, t.validate()
}

func readFile[T any](path string, read func(io.Reader) (T, error)) (T, error) {
	f, err := os.Open(path)
	if err != nil {
		var zero T
		return zero, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return v, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// readTableFile is readTable of the file at path; errors other than a file
// that cannot be opened name the path.
func readTableFile(path string, required ...string) (*table, error) {
	return readFile(path, func(r io.Reader) (*table, error) { return readTable(r, required...) })
}

// table is a CSV read into rows addressed by column name.
type table struct {
	cols map[string]int
	rows [][]string
}

func readTable(r io.Reader, required ...string) (*table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	header, err := cr.Read()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty file")
		}
		return nil, err
	}
	t := &table{cols: map[string]int{}}
	for i, h := range header {
		t.cols[strings.TrimSpace(h)] = i
	}
	for _, c := range required {
		if _, ok := t.cols[c]; !ok {
			return nil, fmt.Errorf("missing column %q (header %q)", c, strings.Join(header, ","))
		}
	}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return t, nil
		}
		if err != nil {
			return nil, err
		}
		t.rows = append(t.rows, rec)
	}
}

func (t *table) str(row []string, col string) string {
	i, ok := t.cols[col]
	if !ok || i >= len(row) {
		return ""
	}
	return strings.TrimSpace(row[i])
}

func (t *table) num(row []string, line int, col string) (int64, error) {
	s := t.str(row, col)
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("line %d: column %s: want a non-negative integer, got %q", line, col, s)
	}
	return v, nil
}

// nums is num of each of cols, in order; the first bad one is the error.
func (t *table) nums(row []string, line int, cols ...string) ([]int64, error) {
	out := make([]int64, len(cols))
	for i, c := range cols {
		v, err := t.num(row, line, c)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// ReadNodes reads a node list in format (FormatOpenb or FormatMemory).
func ReadNodes(r io.Reader, format string) ([]NodeSpec, error) {
	var nameCol string
	required := []string{"cpu_milli", "memory_mib", "gpu", "model"}
	switch format {
	case FormatOpenb:
		nameCol = "sn"
	case FormatMemory:
		nameCol = "name"
		required = append(required, "card_gib")
	default:
		return nil, fmt.Errorf("unknown trace format %q (want %s or %s)", format, FormatOpenb, FormatMemory)
	}
	t, err := readTable(r, append(required, nameCol)...)
	if err != nil {
		return nil, err
	}
	nodes := make([]NodeSpec, 0, len(t.rows))
	for k, row := range t.rows {
		line := k + 2
		v, err := t.nums(row, line, "cpu_milli", "memory_mib", "gpu")
		if err != nil {
			return nil, err
		}
		n := NodeSpec{Name: t.str(row, nameCol), CPUMilli: v[0], MemoryMiB: v[1]}
		gpus := v[2]
		capacity := int64(OpenbCardUnits)
		if format == FormatMemory {
			if capacity, err = t.num(row, line, "card_gib"); err != nil {
				return nil, err
			}
			if capacity == 0 && gpus > 0 {
				return nil, fmt.Errorf("line %d: card_gib is 0", line)
			}
		}
		model := t.str(row, "model")
		for i := int64(0); i < gpus; i++ {
			n.Cards = append(n.Cards, CardSpec{Model: model, Capacity: capacity})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// ReadPods reads a pod list in format (FormatOpenb or FormatMemory).
func ReadPods(r io.Reader, format string) ([]PodSpec, error) {
	var shareCol string
	switch format {
	case FormatOpenb:
		shareCol = "gpu_milli"
	case FormatMemory:
		shareCol = "gpu_gib"
	default:
		return nil, fmt.Errorf("unknown trace format %q (want %s or %s)", format, FormatOpenb, FormatMemory)
	}
	t, err := readTable(r, "name", "cpu_milli", "memory_mib", "num_gpu", shareCol)
	if err != nil {
		return nil, err
	}
	pods := make([]PodSpec, 0, len(t.rows))
	for k, row := range t.rows {
		line := k + 2
		v, err := t.nums(row, line, "cpu_milli", "memory_mib", "num_gpu", shareCol)
		if err != nil {
			return nil, err
		}
		p := PodSpec{Name: t.str(row, "name"), Models: splitModels(t.str(row, "gpu_spec")), CPUMilli: v[0], MemoryMiB: v[1]}
		gpus, share := v[2], v[3]
		switch {
		case gpus > 1:
			p.WholeCards = int(gpus)
		case gpus == 1:
			if share == 0 {
				return nil, fmt.Errorf("line %d: pod %s asks for one GPU with %s 0", line, p.Name, shareCol)
			}
			p.Units = share
		}
		pods = append(pods, p)
	}
	return pods, nil
}
