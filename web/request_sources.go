package web

import (
	"strings"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Where a request's TTFT came from, as the API names it (ttft_source).
const (
	ttftClientAttribute = "client_attribute"
	ttftChunkEvent      = "chunk_event"
	ttftServerSpan      = "server_span"
	sourceNone          = "none"
)

// ttftSource names the kind of TTFT source of r and, for a client one, the
// wire key (an attribute, or the event's name).
func ttftSource(r *telemetry.LLMRequest) (kind, key string) {
	src := r.TTFTSource
	switch {
	case r.TTFT == nil:
		return sourceNone, ""
	case src == telemetry.TTFTFromServer:
		return ttftServerSpan, ""
	case src == "" || src == telemetry.SourceUnrecorded:
		return telemetry.SourceUnrecorded, ""
	case strings.HasPrefix(src, "event:"):
		return ttftChunkEvent, strings.TrimPrefix(src, "event:")
	}
	return ttftClientAttribute, src
}

// tokenSource names which side r's token counts came from.
func tokenSource(r *telemetry.LLMRequest) string {
	switch {
	case r.InputTokens == nil && r.OutputTokens == nil:
		return sourceNone
	case r.TokenSource == "":
		return telemetry.SourceUnrecorded
	}
	return r.TokenSource
}

// ttftSourceWords says on the request page where its TTFT came from.
func ttftSourceWords(r *telemetry.LLMRequest) string {
	kind, key := ttftSource(r)
	switch kind {
	case ttftServerSpan:
		return "the server span (no client TTFT: network unknown)"
	case ttftChunkEvent:
		return "the client's first chunk event (" + key + ")"
	case ttftClientAttribute:
		key, after := strings.CutSuffix(key, telemetry.TTFTAfterHeaders)
		if after {
			return "the client attribute " + key + ", timed from the response headers"
		}
		return "the client attribute " + key
	case telemetry.SourceUnrecorded:
		return "not recorded (assembled before sources were kept)"
	}
	return "no TTFT was sent"
}

// tokenSourceWords says on the request page where its token counts came from.
func tokenSourceWords(r *telemetry.LLMRequest) string {
	switch tokenSource(r) {
	case telemetry.TokensFromServer:
		return "the server span"
	case telemetry.TokensFromClient:
		return "the client span"
	case telemetry.TokensMixed:
		return "one count from each side (the server's where it gave one)"
	case telemetry.SourceUnrecorded:
		return "not recorded (assembled before sources were kept)"
	}
	return "no counts were sent"
}
