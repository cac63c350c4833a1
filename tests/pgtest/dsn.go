package pgtest

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
)

// dsnParts is a parsed DSN in either libpq form: a URL
// (postgres://user:pw@host:port/db?k=v) or keyword/value pairs
// (host=h port=5432 user=u).
type dsnParts struct {
	url *url.URL // URL form
	kv  []kvPair // keyword/value form, in order
}

type kvPair struct{ key, value string }

func parseDSN(s string) (dsnParts, error) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		u, err := url.Parse(s)
		if err != nil {
			return dsnParts{}, err
		}
		return dsnParts{url: u}, nil
	}
	kv, err := parseKeywords(s)
	if err != nil {
		return dsnParts{}, err
	}
	return dsnParts{kv: kv}, nil
}

// parseKeywords parses libpq's keyword/value form: key=value pairs separated
// by spaces, values optionally single-quoted with \' and \\ escapes.
func parseKeywords(s string) ([]kvPair, error) {
	var out []kvPair
	i := 0
	skipSpace := func() {
		for i < len(s) && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r') {
			i++
		}
	}
	for {
		skipSpace()
		if i >= len(s) {
			return out, nil
		}
		eq := strings.IndexByte(s[i:], '=')
		if eq < 0 {
			return nil, fmt.Errorf("invalid DSN: missing '=' after %q", s[i:])
		}
		key := strings.TrimSpace(s[i : i+eq])
		i += eq + 1
		skipSpace()
		var val strings.Builder
		if i < len(s) && s[i] == '\'' {
			i++
			for {
				if i >= len(s) {
					return nil, fmt.Errorf("invalid DSN: unterminated quoted value for %q", key)
				}
				c := s[i]
				i++
				if c == '\'' {
					break
				}
				if c == '\\' && i < len(s) {
					c = s[i]
					i++
				}
				val.WriteByte(c)
			}
		} else {
			for i < len(s) && s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r' {
				c := s[i]
				i++
				if c == '\\' && i < len(s) {
					c = s[i]
					i++
				}
				val.WriteByte(c)
			}
		}
		out = append(out, kvPair{key, val.String()})
	}
}

func (p dsnParts) get(key string) string {
	v := ""
	for _, kv := range p.kv {
		if kv.key == key {
			v = kv.value // the last one wins, as in libpq
		}
	}
	return v
}

// hostPort returns the (first) host and port, defaulting the port to 5432.
func (p dsnParts) hostPort() (string, int) {
	var host, port string
	if p.url != nil {
		host, port = p.url.Hostname(), p.url.Port()
		if host == "" {
			host = p.url.Query().Get("host")
		}
	} else {
		host, port = p.get("host"), p.get("port")
	}
	host, _, _ = strings.Cut(host, ",")
	port, _, _ = strings.Cut(port, ",")
	n, err := strconv.Atoi(port)
	if err != nil || n == 0 {
		n = 5432
	}
	return host, n
}

// with returns the DSN with other credentials or database; see
// Server.DSNFor for the rules.
func (p dsnParts) with(user, password, dbname string) string {
	if p.url != nil {
		u := *p.url
		if user != "" {
			if password != "" {
				u.User = url.UserPassword(user, password)
			} else {
				u.User = url.User(user)
			}
			// Credentials given as query parameters would override the
			// userinfo; drop them.
			q := u.Query()
			if q.Has("user") || q.Has("password") {
				q.Del("user")
				q.Del("password")
				u.RawQuery = q.Encode()
			}
		}
		if dbname != "" {
			u.Path, u.RawPath = "/"+dbname, ""
			q := u.Query()
			if q.Has("dbname") {
				q.Del("dbname")
				u.RawQuery = q.Encode()
			}
		}
		return u.String()
	}
	var kv []kvPair
	for _, e := range p.kv {
		switch {
		case user != "" && (e.key == "user" || e.key == "password"):
		case dbname != "" && e.key == "dbname":
		default:
			kv = append(kv, e)
		}
	}
	if user != "" {
		kv = append(kv, kvPair{"user", user})
		if password != "" {
			kv = append(kv, kvPair{"password", password})
		}
	}
	if dbname != "" {
		kv = append(kv, kvPair{"dbname", dbname})
	}
	parts := make([]string, len(kv))
	for i, e := range kv {
		parts[i] = e.key + "=" + quoteValue(e.value)
	}
	return strings.Join(parts, " ")
}

func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n\r'\\") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	v = strings.ReplaceAll(v, `'`, `\'`)
	return "'" + v + "'"
}
