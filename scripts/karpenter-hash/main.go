// Command karpenter-hash prints what Karpenter's own Go code computes from objects alone — the
// drift hashes of NodePools and EC2NodeClasses, a pod's eviction cost, a node's disruption cost
// and the Balanced policy's score of a move — so that Kerf's tests compare Kerf with Karpenter
// rather than with a reading of it. Built by `scripts/e2e-cluster.sh karpenter-hash` from the
// Go module proxy.
//
// Input (stdin): a JSON array, each item one of
//   - a NodePool (karpenter.sh/v1) or an EC2NodeClass (karpenter.k8s.aws/v1) as the API server
//     returns it: its hash (the CA bundle for the EC2NodeClass hash is the first argument);
//   - {"kind": "PodList", "items": [pods]}: each pod's eviction cost, and the node disruption
//     cost of them all (Karpenter's feature gates at their defaults);
//   - {"kind": "BalancedMove", "savings", "disruption", "totalCost", "totalDisruption"}: the
//     move's Balanced score with k = 2 and whether it is approved;
//   - {"kind": "MetricFamilies"}: every family a running Karpenter serves from
//     controller-runtime's registry, whether or not anything was observed: those its
//     packages register as they load, and those its status controllers (NodeClaim, NodePool,
//     Node, EC2NodeClass; made here with the options Karpenter's own controller lists give
//     them) and the AWS SDK's request families register as they are made: name, type, label
//     names and histogram buckets;
//   - {"kind": "DisruptionBudget", "nodePool", "nodes", "reason", "now"}: how many of the
//     NodePool's `nodes` its budgets let `reason` disrupt at `now` (RFC 3339), as the
//     disruption controller reads them (`MustGetAllowedDisruptions`);
//   - {"kind": "NodePoolStats", "reason", "nodes": [{"node", "nodeClaim"}]}: the nodes each
//     NodePool's budgets count and how many of them already disrupt, for `reason`, over the
//     given Node and NodeClaim pairs (either may be null) as cluster state holds them;
//   - {"kind": "DoNotDisrupt", "pods", "now"} (answer: "blocks", and "told", the events each
//     pod's check published): whether each pod keeps its node from voluntary
//     disruption at `now` by its `karpenter.sh/do-not-disrupt` annotation (`IsDisruptable`);
//   - {"kind": "PodsDisruptable", "pods", "pdbs", "now"}: whether a node holding `pods` may be
//     a disruption candidate as far as its pods say (`ValidatePodsDisruptable`'s two checks:
//     each pod's do-not-disrupt, then the PodDisruptionBudgets, whose status is read as given);
//   - {"kind": "KubeletConfig", "kubelet"}: the errors the EC2NodeClass's validation reports
//     for `kubelet` as `spec.kubelet` (`ValidateKubeletConfig`), and whether its AL2 (and
//     Bottlerocket) families apply every key (`UnmanagedKubeletFields`);
//   - {"kind": "KubeletFields"}: the shape of the upstream KubeletConfiguration that
//     validation decodes into (k8s.io/kubelet as Karpenter's go.mod pins it): each field's
//     JSON name and type, nested, as the decoder sees them;
//   - {"kind": "Events", "pod", "node", "nodeClaim", "nodePool", "nodeClass"} (a Pod, Node,
//     NodeClaim, NodePool and EC2NodeClass; any may be absent): the Events Karpenter's
//     constructors build about them, for each constructor whose event Kerf also publishes and
//     whose objects are given, called with the fixed arguments of `eventArgs` (a reason
//     "Drifted", an error "boom", …): each event's constructor, involved object's kind, type,
//     reason, message, dedupe values and dedupe timeout (the recorder's: 2 minutes when the
//     constructor sets none), and whether a rate limiter also gates it.
//
// Output (stdout): a JSON array, one result per item: {"kind", "name", "hash", "version"},
// {"kind", "costs", "cost"}, {"kind", "score", "approved"} (the score as text: it may be +Inf),
// {"kind", "families": [{"name", "type", "help", "labels", "buckets"}]}, {"kind", "allowed"} or
// {"kind", "numNodes", "disrupting"} (by NodePool), {"kind", "blocks"} (one per pod) or
// {"kind", "blockedBy", "pdbs"} ("do-not-disrupt", "pdb" or "", and the budgets named),
// {"kind", "errors", "unmanaged"}, {"kind", "shape"} or {"kind", "events": [{"constructor",
// "object", "type", "reason", "message", "dedupeValues", "dedupeTimeoutSeconds",
// "rateLimited"}]} (rateLimited only when true).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	cloudproviderevents "github.com/aws/karpenter-provider-aws/pkg/cloudprovider/events"
	interruptionevents "github.com/aws/karpenter-provider-aws/pkg/controllers/interruption/events"
	"github.com/aws/karpenter-provider-aws/pkg/controllers/nodeclass"
	prometheusv2 "github.com/jonathan-innis/aws-sdk-go-prometheus/v2"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/kubernetes/scheme"
	kubeletconfigv1beta1 "k8s.io/kubelet/config/v1beta1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/controllers/disruption"
	disruptionevents "sigs.k8s.io/karpenter/pkg/controllers/disruption/events"
	terminatorevents "sigs.k8s.io/karpenter/pkg/controllers/node/termination/terminator/events"
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/consistency"
	// lifecycle and scheduling register metric families as they load, as the packages below do
	"sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/lifecycle"
	rebootevents "sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/reboot/events"
	"sigs.k8s.io/karpenter/pkg/controllers/provisioning/scheduling"
	"sigs.k8s.io/karpenter/pkg/controllers/state"
	"sigs.k8s.io/karpenter/pkg/events"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	disruptionutils "sigs.k8s.io/karpenter/pkg/utils/disruption"
	pdbutils "sigs.k8s.io/karpenter/pkg/utils/pdb"
	podutils "sigs.k8s.io/karpenter/pkg/utils/pod"

	"github.com/awslabs/operatorpkg/status"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/record"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	// the packages that register Karpenter's metric families as they load
	_ "github.com/aws/karpenter-provider-aws/pkg/batcher"
	_ "github.com/aws/karpenter-provider-aws/pkg/controllers/interruption"
	_ "github.com/aws/karpenter-provider-aws/pkg/controllers/metrics"
	_ "github.com/aws/karpenter-provider-aws/pkg/providers/instance"
	_ "github.com/aws/karpenter-provider-aws/pkg/providers/instancetype"
	_ "github.com/aws/karpenter-provider-aws/pkg/providers/launchtemplate"
	_ "sigs.k8s.io/karpenter/pkg/cloudprovider/metrics"
	metricsnode "sigs.k8s.io/karpenter/pkg/controllers/metrics/node"
	_ "sigs.k8s.io/karpenter/pkg/controllers/metrics/nodepool"
	_ "sigs.k8s.io/karpenter/pkg/controllers/metrics/pod"
	_ "sigs.k8s.io/karpenter/pkg/controllers/node/termination"
	_ "sigs.k8s.io/karpenter/pkg/controllers/node/termination/terminator"
	_ "sigs.k8s.io/karpenter/pkg/controllers/nodeclaim/reboot"
	_ "sigs.k8s.io/karpenter/pkg/controllers/pod/deletioncost"
	_ "sigs.k8s.io/karpenter/pkg/controllers/state"
	_ "sigs.k8s.io/karpenter/pkg/metrics"
	_ "sigs.k8s.io/karpenter/pkg/operator"
	_ "sigs.k8s.io/karpenter/pkg/state/cost"
)

type result struct {
	Kind       string         `json:"kind"`
	Name       string         `json:"name,omitempty"`
	Hash       string         `json:"hash,omitempty"`
	Version    string         `json:"version,omitempty"`
	Costs      []float64      `json:"costs,omitempty"`
	Cost       float64        `json:"cost,omitempty"`
	Score      string         `json:"score,omitempty"`
	Approved   *bool          `json:"approved,omitempty"`
	Families   []family       `json:"families,omitempty"`
	Allowed    *int           `json:"allowed,omitempty"`
	NumNodes   map[string]int `json:"numNodes,omitempty"`
	Disrupting map[string]int `json:"disrupting,omitempty"`
	Blocks     []bool         `json:"blocks,omitempty"`
	Told       [][]string     `json:"told,omitempty"`
	BlockedBy  *string        `json:"blockedBy,omitempty"`
	PDBs       []string       `json:"pdbs,omitempty"`
	Errors     []string       `json:"errors,omitempty"`
	Unmanaged  []string       `json:"unmanaged,omitempty"`
	Shape      *shape         `json:"shape,omitempty"`
	Events     []builtEvent   `json:"events,omitempty"`
}

// builtEvent is one Event a Karpenter constructor built, as its recorder reads it.
type builtEvent struct {
	Constructor          string   `json:"constructor"`
	Object               string   `json:"object"`
	Type                 string   `json:"type"`
	Reason               string   `json:"reason"`
	Message              string   `json:"message"`
	DedupeValues         []string `json:"dedupeValues"`
	DedupeTimeoutSeconds float64  `json:"dedupeTimeoutSeconds"`
	RateLimited          bool     `json:"rateLimited,omitempty"`
}

type eventsQuery struct {
	Pod       *corev1.Pod         `json:"pod"`
	Node      *corev1.Node        `json:"node"`
	NodeClaim *karpv1.NodeClaim   `json:"nodeClaim"`
	NodePool  *karpv1.NodePool    `json:"nodePool"`
	NodeClass *awsv1.EC2NodeClass `json:"nodeClass"`
}

// eventArgs are the fixed arguments the Events item hands the constructors besides its
// objects, so that a test builds the same events in Kerf.
var eventArgs = struct {
	Reason          string // a disruption reason, and an eviction's
	Err             error
	Message         string // a free-form message (a blocked node's, a consistency issue, …)
	Time            time.Time
	GracePeriod     int64
	Command         string // a consolidation command's text, %s the node's name
	Rejection       string
	Savings         float64
	Score           float64
	Threshold       float64
	K               int32
	SavingsPct      float64
	DisruptionPct   float64
	ZoneName        string
	ZoneID          string
	Attachments     []string
	NodeClaimNames  []string
	RepairThreshold string
}{
	Reason:          "Drifted",
	Err:             errors.New("boom"),
	Message:         "boom",
	Time:            time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	GracePeriod:     30,
	Command:         "delete: [%s]",
	Rejection:       "churn",
	Savings:         0.096,
	Score:           1.5,
	Threshold:       1,
	K:               2,
	SavingsPct:      40,
	DisruptionPct:   10,
	ZoneName:        "us-west-2a",
	ZoneID:          "usw2-az1",
	Attachments:     []string{"va-1", "va-2"},
	NodeClaimNames:  []string{"default-a", "default-b", "default-c", "default-d", "default-e", "default-f", "default-g"},
	RepairThreshold: "20%",
}

// shape is a Go type as the JSON decoder reads it: its kind ("struct", "map", "slice", a
// basic kind, or "unmarshaler" for a type that decodes itself), its Go name as error messages
// print it, whether it is reached through a pointer (a null sets a pointer to nil; a value
// that decodes itself is handed the null), and what it holds.
type shape struct {
	Kind    string            `json:"kind"`
	Go      string            `json:"go"`
	Pointer bool              `json:"pointer,omitempty"`
	Name    string            `json:"name,omitempty"`
	Fields  map[string]*shape `json:"fields,omitempty"`
	Key     *shape            `json:"key,omitempty"`
	Elem    *shape            `json:"elem,omitempty"`
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// shapeOf walks t as encoding/json does: pointers are followed, embedded structs without a
// JSON name lend their fields, and a type with its own UnmarshalJSON is not looked into.
func shapeOf(t reflect.Type) *shape {
	pointer := false
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		pointer = true
	}
	if reflect.PointerTo(t).Implements(unmarshaler) {
		return &shape{Kind: "unmarshaler", Go: t.String(), Pointer: pointer}
	}
	s := &shape{Kind: t.Kind().String(), Go: t.String(), Pointer: pointer}
	switch t.Kind() {
	case reflect.Struct:
		s.Name = t.Name()
		s.Fields = map[string]*shape{}
		addFields(t, s.Fields)
	case reflect.Map:
		s.Key = shapeOf(t.Key())
		s.Elem = shapeOf(t.Elem())
	case reflect.Slice, reflect.Array:
		s.Elem = shapeOf(t.Elem())
	}
	return s
}

func addFields(t reflect.Type, into map[string]*shape) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			addFields(ft, into)
			continue
		}
		if name == "" {
			name = f.Name
		}
		into[name] = shapeOf(f.Type)
	}
}

type family struct {
	Name    string    `json:"name"`
	Type    string    `json:"type"`
	Help    string    `json:"help"`
	Labels  []string  `json:"labels"`
	Buckets []float64 `json:"buckets,omitempty"`
}

type budgetQuery struct {
	NodePool karpv1.NodePool `json:"nodePool"`
	Nodes    int             `json:"nodes"`
	Reason   string          `json:"reason"`
	Now      time.Time       `json:"now"`
}

type statsQuery struct {
	Reason string `json:"reason"`
	Nodes  []struct {
		Node      *corev1.Node      `json:"node"`
		NodeClaim *karpv1.NodeClaim `json:"nodeClaim"`
	} `json:"nodes"`
}

// told keeps what Karpenter's checks publish as events ("Reason: message"), for the answer.
type told struct{ events []string }

func (t *told) Publish(evts ...events.Event) {
	for _, e := range evts {
		t.events = append(t.events, e.Reason+": "+e.Message)
	}
}

type doNotDisruptQuery struct {
	Pods []corev1.Pod `json:"pods"`
	Now  time.Time    `json:"now"`
}

type podsQuery struct {
	Pods []corev1.Pod                   `json:"pods"`
	PDBs []policyv1.PodDisruptionBudget `json:"pdbs"`
	Now  time.Time                      `json:"now"`
}

type balancedMove struct {
	Savings         float64 `json:"savings"`
	Disruption      float64 `json:"disruption"`
	TotalCost       float64 `json:"totalCost"`
	TotalDisruption float64 `json:"totalDisruption"`
}

func main() {
	caBundle := ""
	if len(os.Args) > 1 {
		caBundle = os.Args[1]
	}
	var docs []json.RawMessage
	if err := json.NewDecoder(os.Stdin).Decode(&docs); err != nil {
		fmt.Fprintf(os.Stderr, "karpenter-hash: reading a JSON array from stdin: %v\n", err)
		os.Exit(2)
	}
	// the options Karpenter's operator parses, at their defaults (feature gates included)
	ctx := options.ToContext(context.Background(), &options.Options{})
	out := []result{}
	for i, doc := range docs {
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
			os.Exit(2)
		}
		switch head.Kind {
		case "NodePool":
			var np karpv1.NodePool
			decode(i, doc, &np)
			out = append(out, result{Kind: "NodePool", Name: np.Name, Hash: np.Hash(), Version: karpv1.NodePoolHashVersion})
		case "EC2NodeClass":
			var nc awsv1.EC2NodeClass
			decode(i, doc, &nc)
			out = append(out, result{Kind: "EC2NodeClass", Name: nc.Name, Hash: nc.Hash(&caBundle), Version: awsv1.EC2NodeClassHashVersion})
		case "PodList":
			var list corev1.PodList
			decode(i, doc, &list)
			// the costs as read with PodDeletionCostManagement on, when the list asks
			var gate struct {
				PodDeletionCostManagement bool `json:"podDeletionCostManagement"`
			}
			decode(i, doc, &gate)
			listCtx := ctx
			if gate.PodDeletionCostManagement {
				gated := &options.Options{}
				gated.FeatureGates.PodDeletionCostManagement = true
				listCtx = options.ToContext(context.Background(), gated)
			}
			pods := []*corev1.Pod{}
			costs := []float64{}
			for j := range list.Items {
				pods = append(pods, &list.Items[j])
				costs = append(costs, disruptionutils.EvictionCost(listCtx, &list.Items[j]))
			}
			out = append(out, result{Kind: "PodList", Costs: costs, Cost: disruptionutils.ComputeRescheduleDisruptionCost(listCtx, pods)})
		case "BalancedMove":
			var m balancedMove
			decode(i, doc, &m)
			totals := disruption.NodePoolTotals{TotalCost: m.TotalCost, TotalDisruptionCost: m.TotalDisruption}
			r := disruption.ScoreMove(m.Savings, m.Disruption, totals, karpv1.BalancedK)
			approved := r.Approved()
			out = append(out, result{Kind: "BalancedMove", Score: strconv.FormatFloat(r.Score(), 'g', -1, 64), Approved: &approved})
		case "MetricFamilies":
			families, err := metricFamilies()
			if err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			out = append(out, result{Kind: "MetricFamilies", Families: families})
		case "DisruptionBudget":
			var q budgetQuery
			decode(i, doc, &q)
			allowed := q.NodePool.MustGetAllowedDisruptions(clocktesting.NewFakeClock(q.Now), q.Nodes, karpv1.DisruptionReason(q.Reason))
			out = append(out, result{Kind: "DisruptionBudget", Allowed: &allowed})
		case "NodePoolStats":
			var q statsQuery
			decode(i, doc, &q)
			nodes := []*state.StateNode{}
			for _, n := range q.Nodes {
				nodes = append(nodes, &state.StateNode{Node: n.Node, NodeClaim: n.NodeClaim})
			}
			numNodes, disrupting := disruption.NodePoolStatsFromNodes(nodes, karpv1.DisruptionReason(q.Reason))
			out = append(out, result{Kind: "NodePoolStats", NumNodes: numNodes, Disrupting: disrupting})
		case "DoNotDisrupt":
			var q doNotDisruptQuery
			decode(i, doc, &q)
			clk := clocktesting.NewFakeClock(q.Now)
			blocks := []bool{}
			toldOf := [][]string{}
			for j := range q.Pods {
				t := &told{}
				blocks = append(blocks, !podutils.IsDisruptable(&q.Pods[j], clk, t))
				toldOf = append(toldOf, append([]string{}, t.events...))
			}
			out = append(out, result{Kind: "DoNotDisrupt", Blocks: blocks, Told: toldOf})
		case "PodsDisruptable":
			var q podsQuery
			decode(i, doc, &q)
			blockedBy, keys, err := podsDisruptable(ctx, q)
			if err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			out = append(out, result{Kind: "PodsDisruptable", BlockedBy: &blockedBy, PDBs: keys})
		case "KubeletConfig":
			var q struct {
				Kubelet awsv1.KubeletConfiguration `json:"kubelet"`
			}
			decode(i, doc, &q)
			errs := []string{}
			for _, err := range awsv1.ValidateKubeletConfig(q.Kubelet) {
				errs = append(errs, err.Error())
			}
			out = append(out, result{Kind: "KubeletConfig", Errors: errs, Unmanaged: awsv1.UnmanagedKubeletFields(q.Kubelet)})
		case "KubeletFields":
			out = append(out, result{Kind: "KubeletFields", Shape: shapeOf(reflect.TypeFor[kubeletconfigv1beta1.KubeletConfiguration]())})
		case "Events":
			var q eventsQuery
			decode(i, doc, &q)
			out = append(out, result{Kind: "Events", Events: karpenterEvents(q)})
		default:
			fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: kind %q is not one this program reads\n", i, head.Kind)
			os.Exit(2)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}

// metricFamilies lists the `karpenter_*` families in controller-runtime's registry. A vector
// with no children is absent from Gather, so each registered vector first gets one child
// (labels all empty), found through the registry's private collector table. Families
// registered when a controller is made, not when its package loads, are registered first.
func metricFamilies() ([]family, error) {
	// the node metrics register when their controller is made, with the well-known labels
	// the AWS provider's API package added as it loaded
	metricsnode.NewController(nil)
	// the status controllers register theirs as they are made, as Karpenter makes them
	recorder := record.NewFakeRecorder(1)
	buckets := status.WithHistogramBuckets(prometheus.ExponentialBuckets(0.5, 2, 15))
	nodeClass := karpv1.NodeClassLabelKey(schema.GroupKind{Group: "karpenter.k8s.aws", Kind: "EC2NodeClass"})
	status.NewController[*karpv1.NodeClaim](nil, recorder, status.EmitDeprecatedMetrics, buckets,
		status.WithLabels(nodeClass, karpv1.NodePoolLabelKey))
	status.NewController[*karpv1.NodePool](nil, recorder, status.EmitDeprecatedMetrics, buckets)
	status.NewGenericObjectController[*corev1.Node](nil, recorder, buckets,
		status.WithLabels(nodeClass, karpv1.NodePoolLabelKey, karpv1.NodeInitializedLabelKey))
	status.NewController[*awsv1.EC2NodeClass](nil, recorder, status.EmitDeprecatedMetrics)
	// the AWS SDK's request families, registered as the AWS provider's operator wraps its
	// SDK config
	prometheusv2.WithPrometheusMetrics(aws.Config{}, crmetrics.Registry)
	registry, ok := crmetrics.Registry.(*prometheus.Registry)
	if !ok {
		return nil, fmt.Errorf("controller-runtime's registry is a %T, not a *prometheus.Registry", crmetrics.Registry)
	}
	table := reflect.ValueOf(registry).Elem().FieldByName("collectorsByID")
	if !table.IsValid() {
		return nil, fmt.Errorf("prometheus.Registry has no collectorsByID field")
	}
	table = reflect.NewAt(table.Type(), unsafe.Pointer(table.UnsafeAddr())).Elem()
	for _, key := range table.MapKeys() {
		collector := table.MapIndex(key).Interface().(prometheus.Collector)
		descs := make(chan *prometheus.Desc, 16)
		go func() { collector.Describe(descs); close(descs) }()
		labels := 0
		for d := range descs {
			text := d.String()
			if at := strings.LastIndex(text, "variableLabels: {"); at >= 0 {
				inner := strings.TrimSuffix(strings.TrimSuffix(text[at+len("variableLabels: {"):], "}"), "}")
				if inner != "" {
					labels = len(strings.Split(inner, ","))
				}
			}
		}
		with := reflect.ValueOf(collector).MethodByName("WithLabelValues")
		if !with.IsValid() {
			continue
		}
		args := make([]reflect.Value, labels)
		for j := range args {
			args[j] = reflect.ValueOf("")
		}
		with.Call(args)
	}
	gathered, err := registry.Gather()
	if err != nil {
		return nil, err
	}
	families := []family{}
	for _, mf := range gathered {
		f := family{Name: mf.GetName(), Type: strings.ToLower(mf.GetType().String()), Help: mf.GetHelp(), Labels: []string{}}
		if len(mf.GetMetric()) > 0 {
			m := mf.GetMetric()[0]
			for _, l := range m.GetLabel() {
				f.Labels = append(f.Labels, l.GetName())
			}
			for _, b := range m.GetHistogram().GetBucket() {
				f.Buckets = append(f.Buckets, b.GetUpperBound())
			}
		}
		sort.Strings(f.Labels)
		families = append(families, f)
	}
	return families, nil
}

// podsDisruptable runs the two pod checks of a disruption candidate in Karpenter's order: any
// pod's do-not-disrupt, then whether the PodDisruptionBudgets (held by a fake client, their
// status as given) let every pod be evicted.
func podsDisruptable(ctx context.Context, q podsQuery) (string, []string, error) {
	clk := clocktesting.NewFakeClock(q.Now)
	pods := []*corev1.Pod{}
	for j := range q.Pods {
		if !podutils.IsDisruptable(&q.Pods[j], clk, nil) {
			return "do-not-disrupt", nil, nil
		}
		pods = append(pods, &q.Pods[j])
	}
	builder := fake.NewClientBuilder().WithScheme(scheme.Scheme)
	for j := range q.PDBs {
		builder = builder.WithObjects(&q.PDBs[j])
	}
	limits, err := pdbutils.NewLimits(ctx, builder.Build())
	if err != nil {
		return "", nil, err
	}
	keys, ok := limits.CanEvictPods(pods, clk, nil)
	if ok {
		return "", nil, nil
	}
	names := []string{}
	for _, k := range keys {
		names = append(names, k.String())
	}
	sort.Strings(names)
	return "pdb", names, nil
}

// karpenterEvents calls each constructor of an Event Kerf also publishes whose objects q
// holds, with eventArgs for the rest: core's disruption, termination, NodeClaim,
// provisioning and pod events, then the AWS provider's.
func karpenterEvents(q eventsQuery) []builtEvent {
	out := []builtEvent{}
	add := func(constructor string, evts ...events.Event) {
		for _, e := range evts {
			// the recorder's default when the constructor sets none (defaultDedupeTimeout)
			timeout := e.DedupeTimeout
			if timeout == 0 {
				timeout = 2 * time.Minute
			}
			out = append(out, builtEvent{
				Constructor:          constructor,
				Object:               objectKind(e.InvolvedObject),
				Type:                 e.Type,
				Reason:               e.Reason,
				Message:              e.Message,
				DedupeValues:         append([]string{}, e.DedupeValues...),
				DedupeTimeoutSeconds: timeout.Seconds(),
				RateLimited:          e.RateLimiter != nil,
			})
		}
	}
	a := eventArgs
	pod, node, nodeClaim, nodePool, nodeClass := q.Pod, q.Node, q.NodeClaim, q.NodePool, q.NodeClass
	// disruption
	if node != nil && nodeClaim != nil && nodePool != nil {
		add("disruptionevents.NodeRepairBlocked", disruptionevents.NodeRepairBlocked(node, nodeClaim, nodePool,
			fmt.Sprintf("more than %s of nodes in nodepool %q are unhealthy", a.RepairThreshold, nodePool.Name))...)
	}
	if nodeClaim != nil {
		add("disruptionevents.Launching", disruptionevents.Launching(nodeClaim, a.Reason))
		add("disruptionevents.WaitingOnReadiness", disruptionevents.WaitingOnReadiness(nodeClaim))
	}
	if node != nil && nodeClaim != nil {
		add("disruptionevents.Terminating", disruptionevents.Terminating(node, nodeClaim, a.Reason)...)
		add("disruptionevents.Unconsolidatable", disruptionevents.Unconsolidatable(node, nodeClaim, a.Message)...)
	}
	if node != nil || nodeClaim != nil {
		add("disruptionevents.Blocked", disruptionevents.Blocked(node, nodeClaim, a.Message)...)
	}
	if nodePool != nil {
		add("disruptionevents.NodePoolBlockedForDisruptionReason", disruptionevents.NodePoolBlockedForDisruptionReason(nodePool, karpv1.DisruptionReason(a.Reason)))
	}
	if node != nil && nodeClaim != nil {
		command := fmt.Sprintf(a.Command, node.Name)
		add("disruptionevents.ConsolidationCandidate", disruptionevents.ConsolidationCandidate(node, nodeClaim, command, a.Savings)...)
		add("disruptionevents.ConsolidationRejected", disruptionevents.ConsolidationRejected(node, nodeClaim, command, a.Rejection, a.Savings)...)
		add("disruptionevents.ConsolidationApproved", disruptionevents.ConsolidationApproved(node, nodeClaim, a.Score, a.Threshold, a.K, a.SavingsPct, a.DisruptionPct)...)
	}
	if nodePool != nil {
		add("disruptionevents.ConsolidationApprovedMultiNode", disruptionevents.ConsolidationApprovedMultiNode(nodePool, a.Score, a.Threshold, a.K, a.SavingsPct, a.DisruptionPct))
	}
	// node termination
	if pod != nil {
		grace, at := a.GracePeriod, a.Time
		add("terminatorevents.EvictPod", terminatorevents.EvictPod(pod, a.Reason))
		add("terminatorevents.DisruptPodDelete", terminatorevents.DisruptPodDelete(pod, &grace, &at))
	}
	if node != nil {
		attachments := []*storagev1.VolumeAttachment{}
		for _, name := range a.Attachments {
			va := &storagev1.VolumeAttachment{}
			va.Name = name
			attachments = append(attachments, va)
		}
		add("terminatorevents.NodeFailedToDrain", terminatorevents.NodeFailedToDrain(node, a.Err))
		add("terminatorevents.NodeAwaitingVolumeDetachmentEvent", terminatorevents.NodeAwaitingVolumeDetachmentEvent(node, attachments...))
		add("terminatorevents.NodeTerminationGracePeriodExpiring", terminatorevents.NodeTerminationGracePeriodExpiring(node, a.Time.Format(time.RFC3339)))
	}
	// NodeClaims
	if nodeClaim != nil {
		add("terminatorevents.NodeClaimTerminationGracePeriodExpiring", terminatorevents.NodeClaimTerminationGracePeriodExpiring(nodeClaim, a.Time.Format(time.RFC3339)))
		add("consistency.FailedConsistencyCheckEvent", consistency.FailedConsistencyCheckEvent(nodeClaim, a.Message))
		add("lifecycle.InsufficientCapacityErrorEvent", lifecycle.InsufficientCapacityErrorEvent(nodeClaim, a.Err))
	}
	if pod != nil && nodeClaim != nil {
		add("lifecycle.InsufficientCapacityErrorPodEvent", lifecycle.InsufficientCapacityErrorPodEvent(pod, nodeClaim, a.Err))
	}
	if nodeClaim != nil {
		add("lifecycle.UnregisteredTaintMissingEvent", lifecycle.UnregisteredTaintMissingEvent(nodeClaim))
		add("rebootevents.RebootObserved", rebootevents.RebootObserved(nodeClaim))
		add("rebootevents.RebootFailed", rebootevents.RebootFailed(nodeClaim, a.Message))
	}
	// provisioning
	if pod != nil {
		add("scheduling.NominatePodEvent", scheduling.NominatePodEvent(pod, node, nodeClaim))
		add("scheduling.PodFailedToScheduleEvent", scheduling.PodFailedToScheduleEvent(pod, a.Err))
	}
	if nodePool != nil {
		add("scheduling.NoCompatibleInstanceTypes", scheduling.NoCompatibleInstanceTypes(nodePool, false))
		add("scheduling.NoCompatibleInstanceTypes", scheduling.NoCompatibleInstanceTypes(nodePool, true))
	}
	// pods' do-not-disrupt
	if pod != nil {
		add("podutils.InvalidDoNotDisruptAnnotationEvent", podutils.InvalidDoNotDisruptAnnotationEvent(pod, a.Message))
		add("podutils.DoNotDisruptUntilEvent", podutils.DoNotDisruptUntilEvent(pod, a.Time))
		add("podutils.DoNotDisruptGracePeriodElapsedEvent", podutils.DoNotDisruptGracePeriodElapsedEvent(pod))
	}
	// the AWS provider
	if nodePool != nil {
		add("cloudproviderevents.NodePoolZonalShiftDetected", cloudproviderevents.NodePoolZonalShiftDetected(nodePool, a.ZoneName, a.ZoneID))
		add("cloudproviderevents.NodePoolZonalShiftCleared", cloudproviderevents.NodePoolZonalShiftCleared(nodePool, a.ZoneName, a.ZoneID))
	}
	if nodeClaim != nil {
		add("interruptionevents.SpotInterrupted", interruptionevents.SpotInterrupted(node, nodeClaim)...)
		add("interruptionevents.CapacityReservationInstanceInterrupted", interruptionevents.CapacityReservationInstanceInterrupted(node, nodeClaim)...)
		add("interruptionevents.RebalanceRecommendation", interruptionevents.RebalanceRecommendation(node, nodeClaim)...)
		add("interruptionevents.Stopping", interruptionevents.Stopping(node, nodeClaim)...)
		add("interruptionevents.Terminating", interruptionevents.Terminating(node, nodeClaim)...)
		add("interruptionevents.Unhealthy", interruptionevents.Unhealthy(node, nodeClaim)...)
		add("interruptionevents.TerminatingOnInterruption", interruptionevents.TerminatingOnInterruption(node, nodeClaim)...)
	}
	if nodeClass != nil {
		add("nodeclass.WaitingOnNodeClaimTerminationEvent", nodeclass.WaitingOnNodeClaimTerminationEvent(nodeClass, a.NodeClaimNames))
	}
	return out
}

// objectKind names the kind of an event's involved object.
func objectKind(o any) string {
	switch o.(type) {
	case *corev1.Pod:
		return "Pod"
	case *corev1.Node:
		return "Node"
	case *karpv1.NodeClaim:
		return "NodeClaim"
	case *karpv1.NodePool:
		return "NodePool"
	case *awsv1.EC2NodeClass:
		return "EC2NodeClass"
	}
	return fmt.Sprintf("%T", o)
}

// decode reads item i into v, or says why it cannot and stops.
func decode(i int, doc json.RawMessage, v any) {
	if err := json.Unmarshal(doc, v); err != nil {
		fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
		os.Exit(2)
	}
}
