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
//     move's Balanced score with k = 2 and whether it is approved.
//
// Output (stdout): a JSON array, one result per item: {"kind", "name", "hash", "version"},
// {"kind", "costs", "cost"} or {"kind", "score", "approved"} (the score as text: it may be +Inf).
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	corev1 "k8s.io/api/core/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
	"sigs.k8s.io/karpenter/pkg/controllers/disruption"
	"sigs.k8s.io/karpenter/pkg/operator/options"
	disruptionutils "sigs.k8s.io/karpenter/pkg/utils/disruption"
)

type result struct {
	Kind     string    `json:"kind"`
	Name     string    `json:"name,omitempty"`
	Hash     string    `json:"hash,omitempty"`
	Version  string    `json:"version,omitempty"`
	Costs    []float64 `json:"costs,omitempty"`
	Cost     float64   `json:"cost,omitempty"`
	Score    string    `json:"score,omitempty"`
	Approved *bool     `json:"approved,omitempty"`
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
			if err := json.Unmarshal(doc, &np); err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			out = append(out, result{Kind: "NodePool", Name: np.Name, Hash: np.Hash(), Version: karpv1.NodePoolHashVersion})
		case "EC2NodeClass":
			var nc awsv1.EC2NodeClass
			if err := json.Unmarshal(doc, &nc); err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			out = append(out, result{Kind: "EC2NodeClass", Name: nc.Name, Hash: nc.Hash(&caBundle), Version: awsv1.EC2NodeClassHashVersion})
		case "PodList":
			var list corev1.PodList
			if err := json.Unmarshal(doc, &list); err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			pods := []*corev1.Pod{}
			costs := []float64{}
			for j := range list.Items {
				pods = append(pods, &list.Items[j])
				costs = append(costs, disruptionutils.EvictionCost(ctx, &list.Items[j]))
			}
			out = append(out, result{Kind: "PodList", Costs: costs, Cost: disruptionutils.ComputeRescheduleDisruptionCost(ctx, pods)})
		case "BalancedMove":
			var m balancedMove
			if err := json.Unmarshal(doc, &m); err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			totals := disruption.NodePoolTotals{TotalCost: m.TotalCost, TotalDisruptionCost: m.TotalDisruption}
			r := disruption.ScoreMove(m.Savings, m.Disruption, totals, karpv1.BalancedK)
			approved := r.Approved()
			out = append(out, result{Kind: "BalancedMove", Score: strconv.FormatFloat(r.Score(), 'g', -1, 64), Approved: &approved})
		default:
			fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: kind %q is not one this program reads\n", i, head.Kind)
			os.Exit(2)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
