package rules

import (
	"strings"
	"testing"
)

func TestRender(t *testing.T) {
	names := map[string]string{"locks": `"L"`}
	for in, want := range map[string]string{
		`{{now_ms}}`:                             NowMsSQL,
		`{{ live(l) }}`:                          `l."expires_at_ms" > t.now_ms - 1000`,
		`{{live(l, EXCLUDED."acquired_at_ms")}}`: `l."expires_at_ms" > EXCLUDED."acquired_at_ms" - 1000`,
		`{{fence_text(f."fence")}}`:              `lpad((f."fence")::text, 15, '0')`,
		`{{fence_max}} {{cleanup_grace}}`:        "900000000000000 2000",
		`{{async_release_max}}`:                  "60000",
		`DELETE FROM {{locks}}`:                  `DELETE FROM "L"`,
	} {
		got, err := Render(in, names)
		if err != nil || got != want {
			t.Errorf("Render(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{`{{nope}}`, `{{live()}}`, `{{live(a, b, c)}}`, `{{now_ms(x)}}`, `{{locks(x)}}`, `{{fence_text}}`, `{{ unclosed`} {
		if got, err := Render(bad, names); err == nil {
			t.Errorf("Render(%q) = %q, want an error", bad, got)
		}
	}
}

// The SQL forms agree with the Go forms of the same rules.
func TestSQLMatchesRules(t *testing.T) {
	if !strings.Contains(LiveSQL("l", "n"), "- 1000") || ToleranceMs != 1000 {
		t.Error("LiveSQL must subtract ToleranceMs")
	}
	if !strings.Contains(FenceTextSQL("x"), ", 15, '0'") || FenceDigits != 15 {
		t.Error("FenceTextSQL must pad to FenceDigits")
	}
}

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{`a`: `"a"`, `Mixed`: `"Mixed"`, `x"y`: `"x""y"`} {
		if got := QuoteIdent(in); got != want {
			t.Errorf("QuoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestVariant(t *testing.T) {
	text := "a\n--if queue\nb\n--end\n--if !queue\nc\n--end\nd\n"
	if got := Variant(text, "queue", true); got != "a\nb\nd\n" {
		t.Errorf("with queue: %q", got)
	}
	if got := Variant(text, "queue", false); got != "a\nc\nd\n" {
		t.Errorf("without queue: %q", got)
	}
}

func TestVariantNested(t *testing.T) {
	text := "a\n--if queue\nb\n--if holders\nh\n--end\nc\n--end\n--if holders\nx\n--if !queue\ny\n--end\n--end\nd\n"
	for _, c := range []struct {
		queue, holders bool
		want           string
	}{
		{true, true, "a\nb\nh\nc\nx\nd\n"},
		{true, false, "a\nb\nc\nd\n"},
		{false, true, "a\nx\ny\nd\n"},
		{false, false, "a\nd\n"},
	} {
		// Either order gives the same text.
		a := Variant(Variant(text, "queue", c.queue), "holders", c.holders)
		b := Variant(Variant(text, "holders", c.holders), "queue", c.queue)
		if a != c.want || b != c.want {
			t.Errorf("queue=%v holders=%v: %q, %q; want %q", c.queue, c.holders, a, b, c.want)
		}
	}
}
