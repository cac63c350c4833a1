//go:build race

package clitest

// raceEnabled builds the binary under test with -race too.
const raceEnabled = true
