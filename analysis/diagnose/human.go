package diagnose

// Exported formatters, so pages and alert messages print figures exactly
// as the evidence sentences do.

// FormatPct formats a 0..1 share as "87 %".
func FormatPct(x float64) string { return fmtPct(x) }

// FormatRatio formats a growth factor or burn rate: "1.4×", "12×".
func FormatRatio(x float64) string { return fmtRatio(x) }

// FormatCount formats a possibly fractional count: "3", "2.5".
func FormatCount(x float64) string { return fmtCount(x) }
