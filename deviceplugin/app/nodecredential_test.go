package app

import (
	"context"
	"errors"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func TestCheckNodeIdentity(t *testing.T) {
	tests := []struct {
		name string
		user authenticationv1.UserInfo
		ok   bool
	}{
		{"the node's kubelet", authenticationv1.UserInfo{Username: "system:node:gpu-1", Groups: []string{"system:nodes", "system:authenticated"}}, true},
		{"another node's kubelet is refused", authenticationv1.UserInfo{Username: "system:node:gpu-2", Groups: []string{"system:nodes"}}, false},
		{"the plugin's service account is refused", authenticationv1.UserInfo{Username: "system:serviceaccount:gpushare-system:gpushare-device-plugin", Groups: []string{"system:serviceaccounts"}}, false},
		{"the node's name outside group system:nodes is refused", authenticationv1.UserInfo{Username: "system:node:gpu-1", Groups: []string{"system:authenticated"}}, false},
		{"an administrator is refused", authenticationv1.UserInfo{Username: "kubernetes-admin", Groups: []string{"system:masters"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckNodeIdentity(tt.user, "gpu-1")
			if tt.ok != (err == nil) || (err != nil && !errors.Is(err, ErrNotThisNode)) {
				t.Errorf("CheckNodeIdentity(%v) = %v, want ok=%v", tt.user, err, tt.ok)
			}
		})
	}
}

// whoAmI is a fake clientset whose SelfSubjectReview answers user.
func whoAmI(user string, groups ...string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, &authenticationv1.SelfSubjectReview{Status: authenticationv1.SelfSubjectReviewStatus{UserInfo: authenticationv1.UserInfo{Username: user, Groups: groups}}}, nil
	})
	return c
}

func TestReadClient(t *testing.T) {
	write := fake.NewClientset()
	node := whoAmI("system:node:gpu-1", "system:nodes")
	other := whoAmI("system:node:gpu-2", "system:nodes")
	tests := []struct {
		name    string
		clients Clients
		want    kubernetes.Interface
		err     error
	}{
		{"without a node identity the service account reads", Clients{Write: write}, write, nil},
		{"the node's own identity reads", Clients{Write: write, Read: node}, node, nil},
		{"another node's identity is refused at start", Clients{Write: write, Read: other}, nil, ErrNotThisNode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := readClient(context.Background(), tt.clients, "gpu-1")
			if !errors.Is(err, tt.err) || got != tt.want {
				t.Errorf("readClient = %v, %v; want %v, %v", got, err, tt.want, tt.err)
			}
		})
	}
}
