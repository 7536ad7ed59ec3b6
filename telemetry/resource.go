package telemetry

import (
	"encoding/binary"
	"hash/fnv"
	"slices"
	"time"
)

// Resource is the entity that produced spans (a process, a pod, a host):
// its attributes are the same for every span it sends, so they are stored
// once in the resources table and spans carry only its Hash.
type Resource struct {
	ProjectID  uint32
	Hash       uint64 // ResourceHash(ProjectID, Attributes)
	Service    string
	Attributes map[string]string
	// LastSeen is at or after the start of every span stored with this
	// resource: the resource's retention runs from it, so it outlives them.
	LastSeen time.Time
}

// ResourceHash keys a resource: a 64-bit FNV-1a hash of the project and
// the attributes in key order, never 0 (0 marks a span that keeps its
// resource inline). An empty resource hashes to 0: there is nothing to
// store. The hash must stay stable across versions and restarts: a
// write-ahead log replay recomputes it.
func ResourceHash(project uint32, attrs map[string]string) uint64 {
	if len(attrs) == 0 {
		return 0
	}
	keys := make([]string, 0, len(attrs))
	for k := range attrs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	h := fnv.New64a()
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], project)
	h.Write(n[:])
	// Length prefixes keep ("ab","c") and ("a","bc") apart.
	for _, k := range keys {
		v := attrs[k]
		binary.LittleEndian.PutUint32(n[:], uint32(len(k)))
		h.Write(n[:])
		h.Write([]byte(k))
		binary.LittleEndian.PutUint32(n[:], uint32(len(v)))
		h.Write(n[:])
		h.Write([]byte(v))
	}
	if s := h.Sum64(); s != 0 {
		return s
	}
	return 1
}
