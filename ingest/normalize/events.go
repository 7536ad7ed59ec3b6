package normalize

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	logspb "go.opentelemetry.io/proto/otlp/logs/v1"

	"github.com/tokenpath/tokenpath/telemetry"
)

// Event sources, as stored in telemetry.Event.Source.
const (
	SourceK8s     = "k8s"
	SourceHPA     = "hpa"
	SourceKEDA    = "keda"
	SourceKnative = "knative"
)

// scaleRule recognizes one autoscaler's "replicas changed" event by its
// Kubernetes event reason.
type scaleRule struct {
	Reason string
	Source string
	// Applies, when set, narrows the rule to some involved objects.
	Applies func(objectName string) bool
	// Target, when set, names the scaled workload from the message (the
	// event itself is recorded on the autoscaler object).
	Target func(message string) string
	// InBody says the reason is distinctive enough to recognize in a plain
	// log line (kubectl get events piped through a file log receiver).
	InBody bool
}

// scaleRules lists the scaling events that can explain a cold start or a
// capacity change, with the message each controller writes.
var scaleRules = []scaleRule{
	// HPA, on the HorizontalPodAutoscaler (usually named after its
	// Deployment): "New size: 3; reason: cpu resource utilization
	// (percentage of request) above target". The old size is not stated.
	{Reason: "SuccessfulRescale", Source: SourceHPA, InBody: true},
	// KEDA, on the ScaledObject: "Scaled apps/v1.Deployment llm/vllm from 0
	// to 1, triggered by s0-prometheus" / "Deactivated apps/v1.Deployment
	// llm/vllm from 1 to 0".
	{Reason: "KEDAScaleTargetActivated", Source: SourceKEDA, Target: kedaTarget, InBody: true},
	{Reason: "KEDAScaleTargetDeactivated", Source: SourceKEDA, Target: kedaTarget, InBody: true},
	// Knative's autoscaler sets replicas on the revision's Deployment
	// (named <service>-00001-deployment) and emits no event of its own; the
	// Deployment controller then records "Scaled up replica set
	// hello-00001-deployment-5d8f to 1 from 0". Other Deployments'
	// ScalingReplicaSet events are rollouts or mirror an HPA/KEDA event
	// already counted, so they stay plain k8s events.
	{Reason: "ScalingReplicaSet", Source: SourceKnative, Applies: isKnativeDeployment},
}

var (
	reNewSize    = regexp.MustCompile(`(?i)\bnew size:\s*(\d+)`)
	reFromTo     = regexp.MustCompile(`(?i)\bfrom (\d+) to (\d+)\b`)
	reToFrom     = regexp.MustCompile(`(?i)\bto (\d+) from (\d+)\b`)
	reReplicaSet = regexp.MustCompile(`(?i)\breplica set \S+ to (\d+)\b`)
	reKEDATarget = regexp.MustCompile(`^(?:Scaled|Deactivated) \S+ [^/\s]+/(\S+) from \d`)
	// reHPABody recognizes an HPA message in a log line that carries no
	// reason field.
	reHPABody = regexp.MustCompile(`(?i)\bnew size:\s*\d+;\s*reason:`)
	// reKnativeRevision is the -00001 suffix Knative gives revisions, and
	// reKnativeDeployment the Deployment it creates for one.
	reKnativeRevision   = regexp.MustCompile(`-\d{5}$`)
	reKnativeDeployment = regexp.MustCompile(`-\d{5}-deployment$`)
)

func kedaTarget(message string) string {
	if m := reKEDATarget.FindStringSubmatch(message); m != nil {
		return m[1]
	}
	return ""
}

// isKnativeDeployment matches <service>-00001-deployment: the revision
// suffix keeps the many Deployments simply named "app-deployment" out.
func isKnativeDeployment(name string) bool {
	return reKnativeDeployment.MatchString(name)
}

// knativeService turns "hello-00001-deployment" into "hello", the Knative
// Service the cold start belongs to.
func knativeService(deployment string) string {
	rev := strings.TrimSuffix(deployment, "-deployment")
	return reKnativeRevision.ReplaceAllString(rev, "")
}

// replicas extracts the replica counts a scaling message states.
func replicas(message string) (from, to *int32) {
	if m := reFromTo.FindStringSubmatch(message); m != nil {
		return parseReplicas(m[1]), parseReplicas(m[2])
	}
	if m := reToFrom.FindStringSubmatch(message); m != nil {
		return parseReplicas(m[2]), parseReplicas(m[1])
	}
	if m := reNewSize.FindStringSubmatch(message); m != nil {
		return nil, parseReplicas(m[1])
	}
	if m := reReplicaSet.FindStringSubmatch(message); m != nil {
		return nil, parseReplicas(m[1])
	}
	return nil, nil
}

func parseReplicas(s string) *int32 {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil {
		return nil
	}
	v := int32(n)
	return &v
}

// LogResult is the outcome of normalizing one logs export request.
type LogResult struct {
	Events   []telemetry.Event
	Rejected int64
	// Errors holds the first few reject reasons, for
	// partial_success.error_message.
	Errors []string
}

// Logs extracts scaling and cluster events from a logs export: records of
// the OTel Collector's k8seventsreceiver (k8s.event.* attributes, message
// in the body, involved object in resource k8s.object.*), Kubernetes Event
// objects as the k8sobjectsreceiver ships them (the object as the body),
// and plain log lines naming an HPA or KEDA scaling reason. Rescales become
// Kind "scale", other Kubernetes events Kind "k8s"; every other record is
// application logging and is ignored, not rejected.
func Logs(projectID uint32, req *collogspb.ExportLogsServiceRequest, now time.Time, lim Limits) LogResult {
	lim = lim.withDefaults()
	var (
		res  LogResult
		errs errorLog
	)
	for _, rl := range req.GetResourceLogs() {
		resource := rl.GetResource()
		for _, sl := range rl.GetScopeLogs() {
			for _, lr := range sl.GetLogRecords() {
				if lr == nil {
					continue
				}
				ev, ok := eventOf(lr, resource.GetAttributes(), lim)
				if !ok {
					continue
				}
				ts := lr.TimeUnixNano
				if ts == 0 {
					// Many log SDKs leave the event time unset and
					// only the collector stamps observation.
					ts = lr.ObservedTimeUnixNano
				}
				if ts == 0 {
					errs.reject(fmt.Sprintf("event %s: no timestamp", clip(ev.Reason)))
					continue
				}
				ev.Time = unixNanos(ts)
				if r := checkTime("time", ev.Time, now); r != "" {
					errs.reject(fmt.Sprintf("event %s: %s", clip(ev.Reason), r))
					continue
				}
				ev.ProjectID = projectID
				res.Events = append(res.Events, ev)
			}
		}
	}
	res.Rejected, res.Errors = errs.rejected, errs.reasons
	return res
}

// k8sEvent is what is known of a Kubernetes Event, whichever way it came.
type k8sEvent struct {
	reason, message, objectKind, objectName, eventName string
}

// eventOf classifies one log record; ok is false for application logs.
func eventOf(lr *logspb.LogRecord, resource []*commonpb.KeyValue, lim Limits) (telemetry.Event, bool) {
	attrs := flattenAttributes(lr.Attributes, lim)
	res := flattenAttributes(resource, lim)
	ke, isK8s := fromEventsReceiver(attrs, res, lr.Body, lim)
	if !isK8s {
		ke, isK8s = fromObjectsReceiver(lr.Body, lim)
	}

	var rule *scaleRule
	if isK8s {
		rule = matchReason(ke.reason, ke.objectName)
	} else {
		ke.message = valueString(lr.Body, lim.MaxValueBytes)
		rule = matchText(ke.message, attrs)
		if rule == nil {
			return telemetry.Event{}, false
		}
		ke.reason = rule.Reason
	}

	ev := telemetry.Event{
		Kind:       telemetry.EventK8s,
		Reason:     cleanString(ke.reason, maxNameBytes),
		Source:     SourceK8s,
		Attributes: attrs,
	}
	if strings.HasPrefix(ke.reason, "KEDA") {
		ev.Source = SourceKEDA
	}
	ev.Service = ke.objectName
	if rule != nil {
		ev.Kind = telemetry.EventScale
		ev.Source = rule.Source
		ev.FromReplicas, ev.ToReplicas = replicas(ke.message)
		if rule.Target != nil {
			if t := rule.Target(ke.message); t != "" {
				ev.Service = t
			}
		}
		if rule.Source == SourceKnative {
			ev.Service = knativeService(ke.objectName)
		}
	}
	if ev.Service == "" && ke.eventName != "" {
		// Event names are "<involved object>.<unique hex suffix>".
		if i := strings.LastIndexByte(ke.eventName, '.'); i > 0 {
			ev.Service = ke.eventName[:i]
		}
	}
	if ev.Service == "" {
		ev.Service = res["service.name"]
	}
	ev.Service = cleanString(ev.Service, maxNameBytes)
	if ke.objectKind == "Pod" {
		ev.Instance = cleanString(ke.objectName, maxNameBytes)
	}

	// The stored attributes: the record's, the resource's where they do
	// not collide, and the message, which is the human-readable evidence.
	for k, v := range res {
		if _, taken := attrs[k]; !taken && len(attrs) < lim.MaxAttributes {
			attrs[k] = v
		}
	}
	if ke.message != "" {
		attrs["message"] = cleanString(ke.message, lim.MaxValueBytes)
	}
	return ev, true
}

// fromEventsReceiver reads the k8seventsreceiver shape: k8s.event.reason,
// .action, .name, .uid, .count, .start_time on the record, k8s.object.kind
// and .name on the resource, the event message as the body.
func fromEventsReceiver(attrs, res map[string]string, body *commonpb.AnyValue, lim Limits) (k8sEvent, bool) {
	isK8s := false
	for k := range attrs {
		if strings.HasPrefix(k, "k8s.event.") {
			isK8s = true
			break
		}
	}
	if !isK8s {
		return k8sEvent{}, false
	}
	return k8sEvent{
		reason:     attrs["k8s.event.reason"],
		message:    valueString(body, lim.MaxValueBytes),
		objectKind: res["k8s.object.kind"],
		objectName: res["k8s.object.name"],
		eventName:  attrs["k8s.event.name"],
	}, true
}

// fromObjectsReceiver reads a Kubernetes Event object shipped as the body:
// {"type": "ADDED", "object": {…}} in watch mode, the object itself in pull
// mode; both core/v1 (message, involvedObject) and events.k8s.io/v1 (note,
// regarding) spellings.
func fromObjectsReceiver(body *commonpb.AnyValue, lim Limits) (k8sEvent, bool) {
	obj := body
	if o := member(body, "object"); o != nil {
		obj = o
	}
	if member(obj, "kind") == nil || valueString(member(obj, "kind"), 64) != "Event" {
		return k8sEvent{}, false
	}
	get := func(path ...string) string {
		v := obj
		for _, p := range path {
			v = member(v, p)
		}
		return valueString(v, lim.MaxValueBytes)
	}
	ke := k8sEvent{
		reason:     get("reason"),
		message:    get("message"),
		objectKind: get("involvedObject", "kind"),
		objectName: get("involvedObject", "name"),
		eventName:  get("metadata", "name"),
	}
	if ke.message == "" {
		ke.message = get("note")
	}
	if ke.objectName == "" {
		ke.objectKind, ke.objectName = get("regarding", "kind"), get("regarding", "name")
	}
	return ke, true
}

// member returns key of a kvlist value, or nil.
func member(v *commonpb.AnyValue, key string) *commonpb.AnyValue {
	for _, kv := range v.GetKvlistValue().GetValues() {
		if kv.GetKey() == key {
			return kv.GetValue()
		}
	}
	return nil
}

func matchReason(reason, objectName string) *scaleRule {
	for i := range scaleRules {
		r := &scaleRules[i]
		if r.Reason == reason && (r.Applies == nil || r.Applies(objectName)) {
			return r
		}
	}
	return nil
}

// matchText finds a scaling reason in a plain log line or in its
// attribute values.
func matchText(message string, attrs map[string]string) *scaleRule {
	if strings.Contains(message, "FailedRescale") {
		// Same "New size: N; reason:" text, but nothing was scaled.
		return nil
	}
	for i := range scaleRules {
		r := &scaleRules[i]
		if !r.InBody {
			continue
		}
		if strings.Contains(message, r.Reason) {
			return r
		}
		for _, v := range attrs {
			if v == r.Reason {
				return r
			}
		}
	}
	if reHPABody.MatchString(message) {
		return matchReason("SuccessfulRescale", "")
	}
	return nil
}
