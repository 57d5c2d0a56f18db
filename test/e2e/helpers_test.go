//go:build linux

package e2e_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Admin API of the real master, read directly (not through store/), so that what the
// operator reports is checked against what the store itself says.

type adminAPI struct{ base string }

var adminHTTP = &http.Client{Timeout: 3 * time.Second}

func (a adminAPI) get(path string) ([]byte, error) {
	resp, err := adminHTTP.Get(a.base + path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: HTTP %d: %s", path, resp.StatusCode, body)
	}
	return body, nil
}

type ledgerEntry struct {
	TenantID            string `json:"tenant_id"`
	RequestedQuotaBytes int64  `json:"requested_quota_bytes"`
	EffectiveQuotaBytes int64  `json:"effective_quota_bytes"`
	ChargedBytes        int64  `json:"charged_bytes"`
}

// ledger is GET /api/v1/tenant_quotas, by tenant.
func (a adminAPI) ledger() (map[string]ledgerEntry, error) {
	body, err := a.get("/api/v1/tenant_quotas")
	if err != nil {
		return nil, err
	}
	var env struct {
		Success bool          `json:"success"`
		Data    []ledgerEntry `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("tenant_quotas %s: %w", body, err)
	}
	if !env.Success {
		return nil, fmt.Errorf("tenant_quotas: %s", body)
	}
	out := map[string]ledgerEntry{}
	for _, e := range env.Data {
		out[e.TenantID] = e
	}
	return out, nil
}

type segment struct {
	Name      string `json:"segment_name"`
	SizeBytes int64  `json:"size_bytes"`
	Protocol  string `json:"protocol"`
	Status    string `json:"status"`
	UsedBytes int64  `json:"allocator_used_bytes"`
}

// segments is GET /get_segments_detail.
func (a adminAPI) segments() ([]segment, error) {
	body, err := a.get("/get_segments_detail")
	if err != nil {
		return nil, err
	}
	var d struct {
		Segments []segment `json:"segments"`
	}
	if err := json.Unmarshal(body, &d); err != nil {
		return nil, fmt.Errorf("get_segments_detail %s: %w", body, err)
	}
	return d.Segments, nil
}
