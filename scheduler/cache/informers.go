package cache

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// Attach registers the cache's handlers on the factory's pod and node
// informers and returns the pod lister bind reads pods from. Call it before
// factory.Start; then WaitForSync.
func (c *Cache) Attach(factory informers.SharedInformerFactory) (corelisters.PodLister, error) {
	pods := factory.Core().V1().Pods()
	nodes := factory.Core().V1().Nodes()
	if err := pods.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("pod informer transform: %w", err)
	}
	if err := nodes.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, fmt.Errorf("node informer transform: %w", err)
	}
	podReg, err := pods.Informer().AddEventHandler(handlers(c.SetPod, func(p *corev1.Pod) { c.DeletePod(p.UID) }))
	if err != nil {
		return nil, fmt.Errorf("pod informer: %w", err)
	}
	nodeReg, err := nodes.Informer().AddEventHandler(handlers(c.SetNode, func(n *corev1.Node) { c.DeleteNode(n.Name) }))
	if err != nil {
		return nil, fmt.Errorf("node informer: %w", err)
	}
	c.mu.Lock()
	c.handlers = append(c.handlers, podReg.HasSynced, nodeReg.HasSynced)
	c.mu.Unlock()
	return pods.Lister(), nil
}

// handlers are an informer's event handlers for objects of type T: set on
// every add and update, remove on every delete, including one the informer
// only learnt of after the fact (a DeletedFinalStateUnknown tombstone).
// Objects of another type are ignored.
func handlers[T any](set, remove func(T)) toolscache.ResourceEventHandlerFuncs {
	upsert := func(obj any) {
		if o, ok := obj.(T); ok {
			set(o)
		}
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(T); ok {
				remove(o)
			}
		},
	}
}

// WaitForSync waits for the factory's started informers to sync and for the
// cache's own handlers to have processed their initial lists, then marks the
// cache synced (readyz turns ready). An informer's store can be complete
// while its handlers still run: marking the cache synced then would decide
// on nodes it does not know yet and count too little of what pods hold. It
// fails if ctx ends first.
func (c *Cache) WaitForSync(ctx context.Context, factory informers.SharedInformerFactory) error {
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer for %v did not sync: %w", typ, ctx.Err())
		}
	}
	c.mu.RLock()
	handlers := append([]toolscache.InformerSynced(nil), c.handlers...)
	c.mu.RUnlock()
	if !toolscache.WaitForCacheSync(ctx.Done(), handlers...) {
		return fmt.Errorf("the cache's handlers did not process the informers' initial lists: %w", ctx.Err())
	}
	c.MarkSynced()
	klog.FromContext(ctx).Info("Informer caches synced")
	return nil
}

// stripManagedFields drops managedFields, which the cache never reads, to
// keep a large cluster's pods small in memory.
func stripManagedFields(obj any) (any, error) {
	if acc, err := meta.Accessor(obj); err == nil {
		acc.SetManagedFields(nil)
	}
	return obj, nil
}
