package views

// A narrow screen drops a table's secondary columns so its key figures
// stay in view without scrolling sideways. Each cell of such a column
// carries one of these classes (app.css hides them below the width in
// the name): the requests table's "bundled in TTFT" colspan rules out
// nth-child selectors.
const (
	HideBelowWide   = "hide-below-xl" // < 1440 px: a list of cold starts' pre-inference and tokens (the cold-start wait takes their room)
	HideBelowLarge  = "hide-below-lg" // < 1280 px: requests' ITL and tokens
	HideBelowMedium = "hide-below-md" // < 1100 px: requests' model, pre-inference, E2E; overview's p99, ITL, SLO, token counts
	HideBelowSmall  = "hide-below-sm" // < 800 px: requests' instance; overview's rate, trend and provider; the diagnosis parts' p50 and p99, the slowest requests' service, network and tokens
)
