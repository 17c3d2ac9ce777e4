package main

import (
	"net/url"
	"slices"
)

func urlParse(s string) (*url.URL, error)             { return url.Parse(s) }
func urlUserPassword(user, pass string) *url.Userinfo { return url.UserPassword(user, pass) }

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
