//go:build !linux

package member

import "errors"

// ListeningPorts needs Linux's /proc; elsewhere the member's segments are found by IP alone.
func ListeningPorts(int) (map[int]bool, error) {
	return nil, errors.New("listening ports are read from /proc, which only Linux has")
}
