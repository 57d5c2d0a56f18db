package check

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestTheSummaryCountsInEveryFormat(t *testing.T) {
	r := &Report{}
	r.pass("a", "o", "fine.")
	r.warn("b", "o", "odd.", "look.")
	var table bytes.Buffer
	require.NoError(t, r.Write(&table, "table"))
	lines := strings.Split(strings.TrimSpace(table.String()), "\n")
	assert.Equal(t, "1 passed, 1 warning, 0 failed", lines[len(lines)-1], "one warning, not one warnings")

	var js bytes.Buffer
	require.NoError(t, r.Write(&js, "json"))
	var doc struct {
		Findings []Finding
		Summary  Summary
	}
	require.NoError(t, json.Unmarshal(js.Bytes(), &doc))
	assert.Len(t, doc.Findings, 2)
	assert.Equal(t, Summary{Passed: 1, Warnings: 1}, doc.Summary)
}
