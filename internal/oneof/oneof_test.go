package oneof

import "testing"

type color string

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		s       string
		allowed []color
		want    color
		wantErr string
	}{
		{name: "a listed value is returned", s: "blue", allowed: []color{"red", "blue"}, want: "blue"},
		{name: "two values read as a or b", s: "green", allowed: []color{"red", "blue"}, wantErr: `unknown color "green": use "red" or "blue"`},
		{name: "three values read as a, b or c", s: "", allowed: []color{"red", "blue", "green"}, wantErr: `unknown color "": use "red", "blue" or "green"`},
		{name: "one value is named alone", s: "x", allowed: []color{"red"}, wantErr: `unknown color "x": use "red"`},
		{name: "matching is exact", s: "Red", allowed: []color{"red"}, wantErr: `unknown color "Red": use "red"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse("color", tc.s, tc.allowed...)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("Parse(%q) error = %v, want %q", tc.s, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %q, %v; want %q", tc.s, got, err, tc.want)
			}
		})
	}
}
