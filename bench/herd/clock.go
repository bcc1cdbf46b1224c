package main

import (
	"sync"
	"time"
)

// clockWatch follows the wall clock against the monotonic one. Timers
// (Go's, and client-go's work queues) run on the monotonic clock, while
// retryAfterTimestamp is wall time; when the machine is paused and its
// wall clock stepped forward on resume (a VM snapshot, say), a retry
// planned across the pause happens late by the step on the wall clock.
// The bench reports the steps so a late retry can be told from a slow
// controller.
type clockWatch struct {
	mu    sync.Mutex
	steps []time.Duration
	stop  chan struct{}
	done  chan struct{}
}

// clockStepMin is the smallest wall-clock step recorded.
const clockStepMin = 50 * time.Millisecond

// watchClock samples both clocks every half second until close.
func watchClock() *clockWatch {
	c := &clockWatch{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		prev := time.Now()
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-c.stop:
				return
			case <-tick.C:
			}
			now := time.Now()
			if d := clockStep(prev, now); d >= clockStepMin || d <= -clockStepMin {
				c.mu.Lock()
				c.steps = append(c.steps, d)
				c.mu.Unlock()
			}
			prev = now
		}
	}()
	return c
}

// clockStep is how much more the wall clock moved than the monotonic
// clock between two readings of time.Now.
func clockStep(a, b time.Time) time.Duration {
	return b.Round(0).Sub(a.Round(0)) - b.Sub(a)
}

// close stops the watch and returns the steps seen.
func (c *clockWatch) close() []time.Duration {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.steps
}
