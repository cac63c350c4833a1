package classify

import (
	"errors"
	"slices"
	"strings"
)

// tlsRefused is what pgx's attempt over TLS says when the server does not
// offer TLS ("tls error: server refused TLS connection"). With sslmode
// prefer (pgx's default when the DSN has no sslmode) pgx then tries again
// without TLS, and its ConnectError joins both attempts' errors, the
// refusal first: every connection error against a server without TLS
// would read as a TLS problem before its real cause.
const tlsRefused = "server refused TLS connection"

// CauseFirst returns err with a text that gives the real cause first when
// err joins the errors of several connection attempts (errors.Join, as
// pgx's ConnectError does: one error per host and TLS mode tried): the
// attempts that only say the server refused TLS are left out of the text
// when another attempt says more, and attempts that failed the same way are
// told once. The error returned unwraps to err, so every attempt's error
// is still reached by errors.Is, errors.As and errors.Unwrap. Any other err
// is returned as it is.
func CauseFirst(err error) error {
	joined := findJoined(err)
	if joined == nil {
		return err
	}
	var keep []string
	for _, e := range joined.Unwrap() {
		if e == nil || strings.Contains(e.Error(), tlsRefused) {
			continue
		}
		if t := oneLine(e.Error()); !slices.Contains(keep, t) {
			keep = append(keep, t)
		}
	}
	if len(keep) == 0 || len(keep) == len(joined.Unwrap()) {
		return err // nothing to leave out
	}
	outer, inner := err.Error(), joined.Error()
	short := strings.Join(keep, "; ")
	for _, old := range []string{
		"\n\t" + strings.ReplaceAll(inner, "\n", "\n\t"), // pgx: a prefix, then one attempt per line, indented
		" " + inner,
	} {
		if strings.Contains(outer, old) {
			return &causeFirst{err: err, text: strings.Replace(outer, old, " "+short, 1)}
		}
	}
	if outer == inner {
		return &causeFirst{err: err, text: short}
	}
	return err
}

// findJoined returns the first error in err's chain that joins several.
func findJoined(err error) joinedError {
	for err != nil {
		if j, ok := err.(joinedError); ok {
			return j
		}
		err = errors.Unwrap(err)
	}
	return nil
}

type joinedError interface {
	error
	Unwrap() []error
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// causeFirst is an error with a shorter text than the one it wraps.
type causeFirst struct {
	err  error
	text string
}

func (e *causeFirst) Error() string { return e.text }
func (e *causeFirst) Unwrap() error { return e.err }
