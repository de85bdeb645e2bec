package netns

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
)

// Prefix starts the name of every namespace, root-namespace link and run
// directory tracebed creates.
const Prefix = "tb-"

var runIDPattern = regexp.MustCompile(`^[a-z0-9]{1,6}$`)

// NewRunID returns a random run id.
func NewRunID() string {
	var b [3]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand.Read does not fail (Go 1.24 and later)
	}
	// The first character is a digit, so that a run id never starts with
	// the letter prefix of a test suite's runs (TestRunID), whose cleanup
	// removes the runs with its prefix.
	id := []byte(hex.EncodeToString(b[:]))
	id[0] = '0' + b[0]%10
	return string(id)
}

// TestRunID returns a random run id that starts with prefix (one or two
// characters, the first a letter): test suites that run concurrently give
// their runs distinct prefixes, so each can check and clean up its own runs
// only. Ids from NewRunID start with a digit and never match such a prefix.
func TestRunID(prefix string) string { return (prefix + NewRunID())[:6] }

// NamespaceName is the name of node's namespace in run id.
func NamespaceName(runID, node string) string { return Prefix + runID + "-" + node }

// ValidRunID reports whether id is a valid run id: 1–6 lowercase letters or
// digits.
func ValidRunID(id string) error {
	if !runIDPattern.MatchString(id) {
		return fmt.Errorf("netns: run id %q: want 1–6 lowercase letters or digits", id)
	}
	return nil
}
