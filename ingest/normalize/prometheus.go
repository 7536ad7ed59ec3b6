package normalize

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"strconv"
	"strings"
	"time"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Bounds for one scrape: a /metrics page of an inference server is tens of
// kilobytes; these only stop a misconfigured target from exhausting memory.
const (
	maxExpositionLine    = 1 << 20
	maxExpositionSamples = 200_000
)

// Prometheus parses a Prometheus text exposition (format 0.0.4, as served
// by vLLM, SGLang and TGI on /metrics; OpenMetrics text is accepted too)
// and returns one point per gauge, counter and untyped sample; histograms
// and summaries give their _sum and _count series, buckets and quantiles
// are skipped. Names are folded with MetricName, labels are kept, and
// service/instance come from the scrape target. Samples without a
// timestamp get scrapeTime; NaN/Inf samples and samples whose own timestamp
// is implausible are dropped. A malformed line fails the whole scrape, as
// it does in Prometheus.
//
// The protobuf exposition is not supported: the scraper should send
// Accept: text/plain.
func Prometheus(projectID uint32, body io.Reader, contentType string, scrapeTime time.Time, service, instance string) ([]telemetry.MetricPoint, error) {
	p := promParser{
		types:    map[string]string{},
		lim:      Limits{}.withDefaults(),
		now:      scrapeTime,
		service:  cleanString(service, maxNameBytes),
		instance: cleanString(instance, maxNameBytes),
		project:  projectID,
	}
	if contentType != "" {
		mt, _, err := mime.ParseMediaType(contentType)
		if err != nil {
			return nil, fmt.Errorf("prometheus exposition: content type %q: %w", contentType, err)
		}
		switch mt {
		case "application/vnd.google.protobuf":
			return nil, errors.New("prometheus exposition: protobuf format is not supported, scrape with Accept: text/plain")
		case "application/openmetrics-text":
			p.openMetrics = true
		}
	}
	r := bufio.NewReaderSize(body, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(r)
		if err == io.EOF && line == "" {
			break
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("prometheus exposition line %d: %w", lineNo, err)
		}
		done, perr := p.line(line)
		if perr != nil {
			return nil, fmt.Errorf("prometheus exposition line %d: %w", lineNo, perr)
		}
		if done || err == io.EOF {
			break
		}
	}
	return p.points, nil
}

// readLine returns the next line without its newline, refusing lines over
// maxExpositionLine.
func readLine(r *bufio.Reader) (string, error) {
	var b []byte
	for {
		chunk, isPrefix, err := r.ReadLine()
		b = append(b, chunk...)
		if len(b) > maxExpositionLine {
			return "", errors.New("line longer than 1 MiB")
		}
		if err != nil {
			return string(b), err
		}
		if !isPrefix {
			return string(b), nil
		}
	}
}

type promParser struct {
	types       map[string]string // metric family → declared TYPE
	openMetrics bool
	lim         Limits
	now         time.Time
	service     string
	instance    string
	project     uint32
	points      []telemetry.MetricPoint
	samples     int
}

// line handles one line; done reports OpenMetrics' "# EOF".
func (p *promParser) line(line string) (done bool, err error) {
	line = strings.TrimLeft(line, " \t")
	if line == "" {
		return false, nil
	}
	if line[0] == '#' {
		return p.comment(line), nil
	}
	p.samples++
	if p.samples > maxExpositionSamples {
		return false, fmt.Errorf("more than %d samples", maxExpositionSamples)
	}
	s, err := parseSample(line, p.openMetrics)
	if err != nil {
		return false, err
	}
	if !p.keep(s.name) || math.IsNaN(s.value) || math.IsInf(s.value, 0) {
		return false, nil
	}
	t := p.now
	if s.hasTime {
		if checkTime("timestamp", s.time, p.now) != "" {
			return false, nil
		}
		t = s.time
	}
	p.points = append(p.points, telemetry.MetricPoint{
		ProjectID: p.project,
		Time:      t,
		Service:   p.service,
		Instance:  p.instance,
		Name:      MetricName(cleanString(s.name, maxNameBytes)),
		Labels:    p.clampLabels(s.labels),
		Value:     s.value,
	})
	return false, nil
}

// comment records "# TYPE name type"; HELP, UNIT and free comments carry
// nothing a point needs.
func (p *promParser) comment(line string) (done bool) {
	fields := strings.Fields(line[1:])
	if len(fields) == 1 && fields[0] == "EOF" {
		return true
	}
	if len(fields) >= 3 && fields[0] == "TYPE" {
		name := strings.Trim(fields[1], `"`)
		if _, seen := p.types[name]; !seen {
			p.types[name] = strings.ToLower(fields[2])
		}
	}
	return false
}

// familySuffixes are the series suffixes a family of each type exposes,
// and whether the series is kept as a point.
var familySuffixes = map[string]map[string]bool{
	"histogram":      {"_sum": true, "_count": true, "_bucket": false, "_created": false},
	"gaugehistogram": {"_gsum": true, "_gcount": true, "_bucket": false},
	"summary":        {"_sum": true, "_count": true, "_created": false},
	"counter":        {"_total": true, "_created": false},
	"info":           {"_info": true},
}

// keep says whether a series is stored: everything but buckets, quantiles
// and OpenMetrics _created timestamps.
func (p *promParser) keep(name string) bool {
	if base, ok := strings.CutSuffix(name, "_created"); ok {
		// Python's prometheus_client (vLLM, SGLang) emits each counter's
		// and histogram's creation time as a separate gauge family.
		switch p.types[base] {
		case "counter", "histogram", "summary", "gaugehistogram":
			return false
		}
		if p.types[base+"_total"] == "counter" {
			return false
		}
	}
	if t, ok := p.types[name]; ok {
		switch t {
		case "histogram", "gaugehistogram", "summary":
			// A bare summary sample is a quantile, a bare histogram
			// sample is malformed: only _sum and _count are points.
			return false
		}
		return true
	}
	for i := len(name) - 1; i > 0; i-- {
		if name[i] != '_' {
			continue
		}
		if t, ok := p.types[name[:i]]; ok {
			if keep, known := familySuffixes[t][name[i:]]; known {
				return keep
			}
		}
	}
	return true // untyped
}

func (p *promParser) clampLabels(in map[string]string) map[string]string {
	out := make(map[string]string, min(len(in), p.lim.MaxAttributes))
	for k, v := range in {
		if len(out) >= p.lim.MaxAttributes {
			break
		}
		out[cleanString(k, p.lim.MaxKeyBytes)] = cleanString(v, p.lim.MaxValueBytes)
	}
	return out
}

type promSample struct {
	name    string
	labels  map[string]string
	value   float64
	time    time.Time
	hasTime bool
}

// parseSample reads `name{label="value",…} value [timestamp]`, including
// the quoted forms of UTF-8 metric names (`{"name","label"="value"} 1`,
// `"name" 1`) and OpenMetrics exemplars (` # {…} value`), which are ignored.
func parseSample(line string, openMetrics bool) (promSample, error) {
	s := promSample{labels: map[string]string{}}
	sc := scanner{s: line}
	// Like expfmt, no blank is required where a name or a brace already
	// ends the token: `m {a="b"}`, `m{a="b"}1` and `m+1` all parse.
	switch sc.peek() {
	case '{':
	case '"': // a quoted UTF-8 name before the braces
		q, err := sc.quoted()
		if err != nil {
			return s, fmt.Errorf("metric name: %w", err)
		}
		s.name = q
		sc.blank()
	default:
		s.name = sc.metricName()
		if s.name == "" {
			return s, fmt.Errorf("invalid metric name at %q", clip(line))
		}
		sc.blank()
	}
	if sc.peek() == '{' {
		sc.pos++
		if err := sc.labels(&s); err != nil {
			return s, err
		}
		sc.blank()
	}
	if s.name == "" {
		return s, errors.New("sample without metric name")
	}
	tok := sc.token()
	v, err := strconv.ParseFloat(tok, 64)
	if err != nil {
		return s, fmt.Errorf("invalid value %q", clip(tok))
	}
	s.value = v
	sc.blank()
	if tok := sc.token(); tok != "" && tok != "#" {
		if openMetrics {
			sec, err := strconv.ParseFloat(tok, 64)
			if err != nil || math.IsNaN(sec) || math.Abs(sec) > 1e11 {
				return s, fmt.Errorf("invalid timestamp %q", clip(tok))
			}
			s.time = time.Unix(0, int64(sec*1e9)).UTC()
		} else {
			ms, err := strconv.ParseInt(tok, 10, 64)
			if err != nil || ms > 1e14 || ms < -1e14 {
				return s, fmt.Errorf("invalid timestamp %q", clip(tok))
			}
			s.time = time.UnixMilli(ms).UTC()
		}
		s.hasTime = true
		sc.blank()
		if rest := sc.rest(); rest != "" && rest[0] != '#' {
			return s, fmt.Errorf("unexpected %q after timestamp", clip(rest))
		}
	}
	return s, nil
}

// clip shortens text quoted in an error message.
func clip(s string) string {
	if len(s) > 64 {
		return cleanString(s, 64) + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

// scanner walks one exposition line.
type scanner struct {
	s   string
	pos int
}

func (sc *scanner) peek() byte {
	if sc.pos < len(sc.s) {
		return sc.s[sc.pos]
	}
	return 0
}

func (sc *scanner) rest() string { return sc.s[sc.pos:] }

// blank skips spaces and tabs and reports whether there were any.
func (sc *scanner) blank() bool {
	start := sc.pos
	for sc.pos < len(sc.s) && (sc.s[sc.pos] == ' ' || sc.s[sc.pos] == '\t') {
		sc.pos++
	}
	return sc.pos > start
}

// token reads up to the next space or tab.
func (sc *scanner) token() string {
	start := sc.pos
	for sc.pos < len(sc.s) && sc.s[sc.pos] != ' ' && sc.s[sc.pos] != '\t' {
		sc.pos++
	}
	return sc.s[start:sc.pos]
}

func isNameByte(c byte, first, colon bool) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		return true
	case c == ':':
		return colon
	case c >= '0' && c <= '9':
		return !first
	}
	return false
}

// metricName reads [a-zA-Z_:][a-zA-Z0-9_:]*.
func (sc *scanner) metricName() string { return sc.ident(true) }

func (sc *scanner) ident(colon bool) string {
	start := sc.pos
	for sc.pos < len(sc.s) && isNameByte(sc.s[sc.pos], sc.pos == start, colon) {
		sc.pos++
	}
	return sc.s[start:sc.pos]
}

// quoted reads a "…" string with the exposition escapes \\ \" \n.
func (sc *scanner) quoted() (string, error) {
	if sc.peek() != '"' {
		return "", errors.New("expected '\"'")
	}
	sc.pos++
	var b strings.Builder
	for sc.pos < len(sc.s) {
		c := sc.s[sc.pos]
		sc.pos++
		switch c {
		case '"':
			return b.String(), nil
		case '\\':
			if sc.pos >= len(sc.s) {
				return "", errors.New("unterminated escape")
			}
			e := sc.s[sc.pos]
			sc.pos++
			switch e {
			case 'n':
				b.WriteByte('\n')
			case '\\', '"':
				b.WriteByte(e)
			default:
				return "", fmt.Errorf("invalid escape \\%c", e)
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", errors.New("unterminated quoted string")
}

// labels reads `name="value",…}` after the opening brace. A leading name
// not followed by '=' is the metric name (UTF-8 names, Prometheus 3).
func (sc *scanner) labels(s *promSample) error {
	for {
		sc.blank()
		switch sc.peek() {
		case '}':
			sc.pos++
			return nil
		case 0:
			return errors.New("unterminated label set")
		}
		var name string
		if sc.peek() == '"' {
			q, err := sc.quoted()
			if err != nil {
				return err
			}
			name = q
			sc.blank()
			if c := sc.peek(); (c == ',' || c == '}') && s.name == "" {
				s.name = q
				if c == ',' {
					sc.pos++
				}
				continue
			}
		} else {
			name = sc.ident(s.name == "") // a leading bare name may hold ':'
			if name == "" {
				return fmt.Errorf("invalid label name at %q", clip(sc.rest()))
			}
			sc.blank()
			if c := sc.peek(); (c == ',' || c == '}') && s.name == "" {
				s.name = name // `{name}` and `{name,a="b"}`, as expfmt reads them
				if c == ',' {
					sc.pos++
				}
				continue
			}
		}
		sc.blank()
		if sc.peek() != '=' {
			return fmt.Errorf("expected '=' after label %q", clip(name))
		}
		sc.pos++
		sc.blank()
		value, err := sc.quoted()
		if err != nil {
			return fmt.Errorf("label %q: %w", clip(name), err)
		}
		s.labels[name] = value
		sc.blank()
		switch sc.peek() {
		case ',':
			sc.pos++
		case '}':
		default:
			return fmt.Errorf("expected ',' or '}' after label %q", clip(name))
		}
	}
}
