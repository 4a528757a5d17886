package plugin

import (
	"context"
	"testing"
	"time"
)

func TestDrainWaitsForTheCallInFlightThenForQuiet(t *testing.T) {
	var f inFlight
	release := make(chan struct{})
	started := make(chan struct{})
	go func() {
		_, _ = f.count(context.Background(), nil, nil, func(context.Context, any) (any, error) {
			close(started)
			<-release
			return nil, nil
		})
	}()
	<-started
	time.AfterFunc(300*time.Millisecond, func() { close(release) })
	start := time.Now()
	f.drain(10*time.Second, 100*time.Millisecond)
	if took := time.Since(start); took < 400*time.Millisecond || took > 5*time.Second {
		t.Errorf("drain took %v, want the call's 300 ms plus 100 ms of quiet", took)
	}
}

func TestDrainGivesUpAtItsLimit(t *testing.T) {
	var f inFlight
	started := make(chan struct{})
	go func() {
		_, _ = f.count(context.Background(), nil, nil, func(context.Context, any) (any, error) {
			close(started)
			select {} // never answers
		})
	}()
	<-started
	start := time.Now()
	f.drain(200*time.Millisecond, 50*time.Millisecond)
	if took := time.Since(start); took < 200*time.Millisecond || took > 5*time.Second {
		t.Errorf("drain took %v, want its 200 ms limit", took)
	}
}

func TestDrainOfAnIdleEndpointWaitsOnlyTheQuiet(t *testing.T) {
	var f inFlight
	start := time.Now()
	f.drain(10*time.Second, 100*time.Millisecond)
	if took := time.Since(start); took < 100*time.Millisecond || took > 5*time.Second {
		t.Errorf("drain took %v, want 100 ms of quiet", took)
	}
}
