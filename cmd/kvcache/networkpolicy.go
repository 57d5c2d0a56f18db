package main

import (
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/kvcache-operator/kvcache/generator"
)

// metricsFromFlag is --network-policy-metrics-from, which the manager and `kvcache render` read
// alike: the chart passes its networkPolicy.metricsFrom to the manager as JSON, and a reviewer
// passes the same to render to print what the operator applies.
const metricsFromFlag = "network-policy-metrics-from"

const metricsFromUsage = "JSON list of NetworkPolicyPeer admitted to the store masters' admin port to scrape their metrics (the chart's networkPolicy.metricsFrom; default: none)"

// peersValue is a pflag.Value over a JSON list of NetworkPolicyPeer.
type peersValue struct {
	peers *[]networkingv1.NetworkPolicyPeer
	raw   string
}

func (v *peersValue) String() string { return v.raw }

func (v *peersValue) Set(s string) error {
	p, err := generator.ParseNetworkPolicyPeers(s)
	if err != nil {
		return err
	}
	*v.peers, v.raw = p, s
	return nil
}

func (v *peersValue) Type() string { return "json" }

// newPeersValue binds into; its default is none.
func newPeersValue(into *[]networkingv1.NetworkPolicyPeer) *peersValue {
	*into = nil
	return &peersValue{peers: into}
}
