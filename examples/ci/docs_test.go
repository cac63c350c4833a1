package ci

import (
	"os"
	"strings"
	"testing"
)

// TestDocsShowTheTests: docs/testing.md shows these files as they are (from
// their imports on), so its snippets are code that compiles and passes.
func TestDocsShowTheTests(t *testing.T) {
	doc, err := os.ReadFile("../../docs/testing.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"../downstream/handler.go", "../downstream/handler_test.go", "../downstream/orders.go", "../downstream/orders_test.go", "conformance_test.go", "smoke_test.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		s := string(src)
		code := strings.TrimRight(s[strings.Index(s, "import ("):], "\n")
		if !strings.Contains(string(doc), "```go\n"+code+"\n```") {
			t.Errorf("docs/testing.md does not show %s as it is (from its imports on)", file)
		}
	}
}
