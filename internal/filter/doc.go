// Package filter is the home of the filter module: iptables, ip6tables, ipset and native nftables
// rules on the forward path, reproduced exactly or handed to Linux rule by rule.
//
//   - model: the forward-path ruleset per address family (hooks, priorities, chains, rules as
//     matches and a verdict), with Unknown matches and Linux verdicts for what is not modelled.
//   - nft: reads the live ruleset from nf_tables (iptables-nft's tables and native ones) and
//     translates it into the model; ipset: reads ipset sets over netlink.
//   - eval: the reference evaluator, the specification the BPF classifier is tested against,
//     with a differential test against the kernel.
//   - filtertest: helpers for tests that load rulesets into throwaway namespaces.
package filter
