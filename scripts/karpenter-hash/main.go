// Command karpenter-hash prints the drift hashes Karpenter's own Go code gives NodePools and
// EC2NodeClasses, so that Kerf's tests compare Kerf's hashes with Karpenter's rather than with
// a reading of it. Built by `scripts/e2e-cluster.sh karpenter-hash` from the Go module proxy.
//
// Input (stdin): a JSON array of objects as the API server returns them, each a NodePool
// (karpenter.sh/v1) or an EC2NodeClass (karpenter.k8s.aws/v1). The CA bundle for the
// EC2NodeClass hash is the first argument (empty when absent).
// Output (stdout): a JSON array, one {"kind", "name", "hash", "version"} per input object.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	awsv1 "github.com/aws/karpenter-provider-aws/pkg/apis/v1"
	karpv1 "sigs.k8s.io/karpenter/pkg/apis/v1"
)

type result struct {
	Kind    string `json:"kind"`
	Name    string `json:"name"`
	Hash    string `json:"hash"`
	Version string `json:"version"`
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
			out = append(out, result{"NodePool", np.Name, np.Hash(), karpv1.NodePoolHashVersion})
		case "EC2NodeClass":
			var nc awsv1.EC2NodeClass
			if err := json.Unmarshal(doc, &nc); err != nil {
				fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: %v\n", i, err)
				os.Exit(2)
			}
			out = append(out, result{"EC2NodeClass", nc.Name, nc.Hash(&caBundle), awsv1.EC2NodeClassHashVersion})
		default:
			fmt.Fprintf(os.Stderr, "karpenter-hash: item %d: kind %q is neither NodePool nor EC2NodeClass\n", i, head.Kind)
			os.Exit(2)
		}
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		os.Exit(1)
	}
}
