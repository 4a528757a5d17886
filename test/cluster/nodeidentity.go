package cluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// NodeKubeconfig writes a node's own identity, as a kubelet holds it: a
// client certificate for user system:node:NODE in group system:nodes, signed
// by the cluster's CA, and a kubeconfig naming the certificate and key by
// file (as kubeadm's /etc/kubernetes/kubelet.conf does), with a copy of the
// CA, all in DIR/NODE/, and returns the kubeconfig's path. server is the API
// server's URL in the kubeconfig ("": the admin kubeconfig's). The API
// server's Node authorizer confines this identity to the node.
func (c *Cluster) NodeKubeconfig(node, dir, server string) (string, error) {
	pki := filepath.Join(c.opts.StateDir, "pki")
	caCert, caKey, err := loadCA(pki)
	if err != nil {
		return "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "system:node:" + node, Organization: []string{"system:nodes"}},
		NotBefore:    time.Now().Add(-time.Minute),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return "", fmt.Errorf("node %s certificate: %w", node, err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, node)
	if err := os.MkdirAll(out, 0o700); err != nil {
		return "", err
	}
	// One PEM file with the certificate and the key, as the kubelet's
	// kubelet-client-current.pem.
	pair := append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})...)
	pairFile := filepath.Join(out, "kubelet-client-current.pem")
	if err := os.WriteFile(pairFile, pair, 0o600); err != nil {
		return "", err
	}
	caFile := filepath.Join(out, "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caCert.Raw}), 0o644); err != nil {
		return "", err
	}
	if server == "" {
		server = c.RESTConfig.Host
	}
	kubeconfig := filepath.Join(out, "kubelet.conf")
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: %q, certificate-authority: %q}}]
users: [{name: system:node:%s, user: {client-certificate: %q, client-key: %q}}]
contexts: [{name: node, context: {cluster: local, user: system:node:%s}}]
current-context: node
`, server, caFile, node, pairFile, pairFile, node)
	if err := os.WriteFile(kubeconfig, []byte(content), 0o600); err != nil {
		return "", err
	}
	return kubeconfig, nil
}

// loadCA reads the cluster's CA certificate and key (hack/cluster.sh makes
// them with openssl: PKCS#8 or PKCS#1).
func loadCA(pki string) (*x509.Certificate, any, error) {
	certPEM, err := os.ReadFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(filepath.Join(pki, "ca.key"))
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("cluster: the CA in " + pki + " is not PEM")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	if key, err := x509.ParsePKCS8PrivateKey(kb.Bytes); err == nil {
		return cert, key, nil
	}
	key, err := x509.ParsePKCS1PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("cluster: the CA key in %s: %w", pki, err)
	}
	return cert, key, nil
}
