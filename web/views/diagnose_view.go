package views

// DiagnoseView is the diagnosis page: live (with controls and links) or
// frozen in a share link (Live false).
type DiagnoseView struct {
	Live bool
	// Heading names what is diagnosed: "rag-chat · llama-3-8b".
	Heading string
	// WindowText is the window in words, with its length.
	WindowText   string
	BaselineText string
	Controls     *Pickers
	// Error is a problem with the URL the user must fix (shown instead of
	// the diagnosis).
	Error string
	Empty bool
	// ModelNote warns when the chosen model has no traffic on the service.
	ModelNote string

	Verdict        string
	Summary        string
	Confidence     float64
	ConfidenceText string
	CountsText     string
	Evidence       []Finding
	Coverage       []CoverageRow
	Answers        []DiagAnswer
	Charts         []DiagChart
	Events         []string
	HasBaseline    bool
	Components     []PartRow
	// ServerMetricsNote says the split comes from the servers' metrics
	// (no server spans) and how to read their quantiles; empty otherwise.
	ServerMetricsNote string
	BubbleUp          []BubbleRow
	BubbleNote        string
	Slowest           []SlowRequestRow
	SlowHref          string
	CompareHref       string
	Share             *ShareBox
	Snapshot          *SnapshotInfo
	// ResultsHref, when set, is where htmx fetches the diagnosis from
	// (the page frame is sent first); WaitHref is the same page computed
	// in one go, for browsers without script.
	ResultsHref string
	WaitHref    string
	// Episodes lead the live page: the service's ongoing or last episode
	// and a strip of the episodes around the window.
	Episodes *EpisodesView
}

// CoverageRow is one service's coverage: what its requests could be split
// with, and what to turn on for more.
type CoverageRow struct {
	Service     string
	Producers   string
	Requests    string
	ClientTTFT  string
	ServerSplit string
	Joined      string // by trace / id / match
	Unmatched   string
	Advice      string
}

// Finding is one numbered finding.
type Finding struct {
	N    int
	Text string
}

// DiagAnswer is one of the questions a diagnosis answers.
type DiagAnswer struct {
	Question string
	Answer   string
	// Status is a word that qualifies the answer without colour: "met",
	// "missed", "memory-bound" …; empty for none.
	Status   string
	Tone     string // good, bad, neutral: the status badge's colour
	Href     string
	HrefText string
}

// PartRow is one part of the request now and in the baseline.
type PartRow struct {
	Name, Hint     string
	P50, P95, P99  string
	BaselineP95    string
	Delta          string
	Direction      string // better, worse, same, unknown
	DirectionWords string
	Swatch         string // CSS class of the chart colour, empty for none
	Headline       bool   // TTFT/E2E rows, set apart from the parts
	// Resolution is the width of the server-histogram bucket the p95 lies
	// in ("within a 2.50 s bucket"); empty for figures from requests.
	Resolution string
}

// BubbleRow is one attribute value over-represented among slow requests.
type BubbleRow struct {
	Attribute, Value string
	Slow, Fast, Base string
	SlowCount        int
	Sentence         string
	// Href lists the window's slow requests with the value; live pages only.
	Href string
}

// SlowRequestRow is one of the slowest requests.
type SlowRequestRow struct {
	Start, TraceID, TraceHref     string
	Service, Instance             string
	TTFT, Queue, Prefill, Network string
	Decode, InputTokens           string
	ColdStart, Error              bool
}

// Pickers are the pickers of a live page.
type Pickers struct {
	Action   string
	Services []PickOption
	Models   []PickOption
	Range    RangePicker
	// Hidden keeps the window (and baseline) when the pickers change.
	Hidden []HiddenField
	// CustomOpen opens the custom-range form (a custom window is shown).
	CustomOpen bool
	Fields     []WindowField
	CustomNote string
	// Presets are the compare page's one-click pairs.
	Presets []RangeOption
}

// PickOption is one choice of a select.
type PickOption struct {
	Value, Label string
	Selected     bool
}

// WindowField is a datetime-local input of the custom range form.
type WindowField struct {
	Name, Label, Value, Group string
}

// DiagChart is a uPlot chart (rendered by app.js from Spec) with its table
// equivalent for readers without the picture.
type DiagChart struct {
	ID, Title, Caption string
	Spec               DiagChartSpec
	TableCaption       string
	Head               []string
	Rows               [][]string
}

// DiagChartSpec is the JSON app.js reads: see static/app.js.
type DiagChartSpec struct {
	Series  []DiagSeries `json:"series"`
	Data    [][]*float64 `json:"data"`
	Markers []DiagMarker `json:"markers"`
	YLabel  string       `json:"yLabel"`
	Y2Label string       `json:"y2Label,omitempty"`
	Y3Label string       `json:"y3Label,omitempty"`
	// Units name how the legend and ticks format values per axis: ms,
	// pct (a 0–100 axis), count.
	YUnit  string `json:"yUnit,omitempty"`
	Y2Unit string `json:"y2Unit,omitempty"`
	Y3Unit string `json:"y3Unit,omitempty"`
	Height int    `json:"height,omitempty"`
}

// DiagSeries is one line or band.
type DiagSeries struct {
	Label string `json:"label"`
	Color string `json:"color"` // a CSS variable name, e.g. --c-queue
	Axis  int    `json:"axis"`  // 1 left, 2 right, 3 a second right axis
	Fill  bool   `json:"fill,omitempty"`
	Dash  bool   `json:"dash,omitempty"`
	// Bold draws the headline line thicker than the parts around it.
	Bold bool `json:"bold,omitempty"`
	// Hidden starts the series off; its legend entry turns it on.
	Hidden bool `json:"hidden,omitempty"`
}

// DiagMarker is a vertical line with a label (scale events, new
// instances).
type DiagMarker struct {
	T     float64 `json:"t"`
	Label string  `json:"label"`
}
