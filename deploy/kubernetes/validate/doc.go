// Package validate checks the Kubernetes manifests of deploy/kubernetes
// without a cluster: each decoded strictly into the API's Go types (an
// unknown or misspelt field is an error), their cross-references (ports,
// selectors, the ConfigMap, the Secret's variable), the hardening the
// systemd unit has, and the ConfigMap's configuration through limitproxy's
// own parser. It is its own module, as bench/ is, so that the product does
// not depend on k8s.io/api.
package validate
