package tcpproxy

import "encoding/binary"

// Protocol codes of untyped startup-phase messages.
const (
	codeSSLRequest    = 80877103
	codeGSSENCRequest = 80877104
)

// frontendParser splits the client→server byte stream into protocol
// messages. The stream opens with untyped messages (int32 length, int32
// code, ...): SSLRequest and GSSENCRequest are followed by another untyped
// StartupMessage; after the StartupMessage (or a CancelRequest) every
// message is typed (byte type, int32 length incl. itself, body).
type frontendParser struct {
	typed bool
	hdr   [8]byte
	hn    int   // header bytes collected
	skip  int64 // body bytes still to skip
}

func (f *frontendParser) feed(b []byte, c *counters) {
	for len(b) > 0 {
		if f.skip > 0 {
			n := int64(len(b))
			if n > f.skip {
				n = f.skip
			}
			f.skip -= n
			b = b[n:]
			continue
		}
		need := 5
		if !f.typed {
			need = 8
		}
		n := copy(f.hdr[f.hn:need], b)
		f.hn += n
		b = b[n:]
		if f.hn < need {
			return
		}
		f.hn = 0
		if f.typed {
			c.msgs[f.hdr[0]].Add(1)
			f.skip = int64(binary.BigEndian.Uint32(f.hdr[1:5])) - 4
		} else {
			c.untyped.Add(1)
			f.skip = int64(binary.BigEndian.Uint32(f.hdr[0:4])) - 8
			switch binary.BigEndian.Uint32(f.hdr[4:8]) {
			case codeSSLRequest, codeGSSENCRequest:
				// another untyped message follows
			default:
				f.typed = true
			}
		}
		if f.skip < 0 {
			f.skip = 0
		}
	}
}
