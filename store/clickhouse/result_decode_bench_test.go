package clickhouse

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// Benchmark-only: how the embedded Result path's JSON decoding compares
// with a one-pass decode of the same engine output (cmd/bench measures the
// end-to-end effect on pages).

// jsonCompactRequests renders rows llm_requests rows as the engine's
// JSONCompact output for RequestColumns (64-bit integers quoted, as chDB
// writes them).
func jsonCompactRequests(rows int) []byte {
	cols := strings.Split(strings.NewReplacer("\n", "", "\t", "", " ", "").Replace(RequestColumns), ",")
	types := map[string]string{"project_id": "UInt32", "start": "DateTime64(9, 'UTC')", "input_tokens": "Nullable(Int64)",
		"output_tokens": "Nullable(Int64)", "cold_start": "UInt8", "error": "UInt8", "call_index": "UInt16"}
	var b bytes.Buffer
	b.WriteString(`{"meta":[`)
	for i, c := range cols {
		c = strings.TrimSpace(c)
		t, ok := types[c]
		if !ok {
			t = "LowCardinality(String)"
			if strings.HasSuffix(c, "_ms") {
				t = "Nullable(Float64)"
			}
		}
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":%q,"type":%q}`, c, t)
	}
	b.WriteString(`],"data":[`)
	for r := 0; r < rows; r++ {
		if r > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `[1,"%032x","%016x","rag-chat","vllm-llama-70b","meta-llama/Llama-3.1-70B-Instruct","vllm","vllm-llama-70b-3",`+
			`"2026-12-01 10:%02d:%02d.123456789",%.3f,118.25,12.5,160.125,6.5,%.3f,7412.5,28.5,null,"%d","%d",0,0,0,"/v1/chat","tenant-ab"]`,
			r*7919, r*104729, r%60, (r/60)%60, 300+float64(r%997), 7000+float64(r%113), 1800+r%500, 250+r%90)
	}
	fmt.Fprintf(&b, `],"rows":%d,"statistics":{"elapsed":0.1,"rows_read":%d,"bytes_read":1}}`, rows, rows)
	return b.Bytes()
}

// decodeOnePass is the proposed decoder: one json.Decoder over the whole
// output, no copies of the buffer, no decoder per cell.
func decodeOnePass(buf []byte) (*Result, error) {
	var raw struct {
		Meta []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"meta"`
		Data [][]any `json:"data"`
	}
	dec := json.NewDecoder(bytes.NewReader(buf))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		return nil, err
	}
	res := &Result{Rows: make([][]any, len(raw.Data))}
	for _, m := range raw.Meta {
		res.Columns = append(res.Columns, m.Name)
		res.Types = append(res.Types, m.Type)
	}
	for i, row := range raw.Data {
		for j, v := range row {
			nv, err := fromJSON(v, res.Types[j])
			if err != nil {
				return nil, err
			}
			row[j] = nv
		}
		res.Rows[i] = row
	}
	return res, nil
}

func TestDecodeOnePassMatches(t *testing.T) {
	buf := jsonCompactRequests(50)
	a, err := decodeJSONCompact(buf)
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeOnePass(buf)
	if err != nil {
		t.Fatal(err)
	}
	ra, rb := ScanRequests(a), ScanRequests(b)
	if len(ra) != 50 || !reflect.DeepEqual(ra, rb) {
		t.Fatalf("decoders disagree:\n%v\n%v", ra[:1], rb[:1])
	}
}

func benchmarkDecode(b *testing.B, decode func([]byte) (*Result, error)) {
	buf := jsonCompactRequests(10_000)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r, err := decode(buf)
		if err != nil {
			b.Fatal(err)
		}
		_ = ScanRequests(r)
	}
}

// BenchmarkDecodeRequestsCurrent: 10k llm_requests rows through today's
// decodeJSONCompact + ScanRequests.
func BenchmarkDecodeRequestsCurrent(b *testing.B) { benchmarkDecode(b, decodeJSONCompact) }

// BenchmarkDecodeRequestsOnePass: the same rows through decodeOnePass.
func BenchmarkDecodeRequestsOnePass(b *testing.B) { benchmarkDecode(b, decodeOnePass) }
