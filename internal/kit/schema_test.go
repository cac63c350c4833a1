package kit

import (
	"reflect"
	"testing"
)

func TestStatementsKeepFunctionBodiesWhole(t *testing.T) {
	ddl := `-- a table
CREATE TABLE IF NOT EXISTS "t" (
  "a" TEXT -- a column;
);

CREATE OR REPLACE FUNCTION "f"() RETURNS int LANGUAGE plpgsql AS $fn$
BEGIN
  -- inside; kept

  RETURN 1;
END
$fn$;
CREATE INDEX IF NOT EXISTS "i" ON "t" ("a");`
	want := []string{
		"CREATE TABLE IF NOT EXISTS \"t\" (\n  \"a\" TEXT -- a column;\n);",
		"CREATE OR REPLACE FUNCTION \"f\"() RETURNS int LANGUAGE plpgsql AS $fn$\nBEGIN\n  -- inside; kept\n\n  RETURN 1;\nEND\n$fn$;",
		"CREATE INDEX IF NOT EXISTS \"i\" ON \"t\" (\"a\");",
	}
	if got := Statements(ddl); !reflect.DeepEqual(got, want) {
		t.Errorf("rule: statements end at a line ending in ';' outside a function's body, which is kept whole (setup compares it):\n got %q\nwant %q", got, want)
	}
	var made []string
	for _, m := range createdRE.FindAllStringSubmatch(ddl, -1) {
		made = append(made, m[1]+" "+m[2])
	}
	if want := []string{`TABLE "t"`, `OR REPLACE FUNCTION "f"`, `INDEX "i"`}; !reflect.DeepEqual(made, want) {
		t.Errorf("rule: setup checks every table, index and function the DDL creates: %q, want %q", made, want)
	}
}
