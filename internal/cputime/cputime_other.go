//go:build !unix && !windows

package cputime

import "time"

func process() time.Duration { return wall() }

func minorFaults() int64 { return -1 }
