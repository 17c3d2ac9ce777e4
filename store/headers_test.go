package store

import (
	"reflect"
	"testing"
)

func TestDecodeHeaders(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want map[string]string
		bad  bool
	}{
		{in: "", want: nil},
		{in: "{}", want: nil},
		{in: "{ }", want: nil},
		{in: `{"traceparent":"00-ab-cd-01"}`, want: map[string]string{"traceparent": "00-ab-cd-01"}},
		{in: `{"n":1,"o":{"a":[true]},"s":"x\u0000y"}`, want: map[string]string{"n": "1", "o": `{"a":[true]}`, "s": "x\x00y"}},
		{in: "[1,2]", bad: true},
		{in: "null", bad: true},
		{in: `"text"`, bad: true},
		{in: "{", bad: true},
	} {
		got, err := DecodeHeaders([]byte(tc.in))
		if tc.bad {
			if err == nil || err.Error() != "is not a JSON object" {
				t.Errorf("%q: %v, %v; want the error %q", tc.in, got, err, "is not a JSON object")
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%q: %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}
