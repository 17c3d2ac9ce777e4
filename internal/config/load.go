package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Error is a problem with a configuration: the key's path (such as
// destinations[0].retry.base), its line (0 when the key is absent) and
// what is wrong.
type Error struct {
	Key     string
	Line    int
	Problem string
}

func (e *Error) Error() string {
	switch {
	case e.Line > 0 && e.Key != "":
		return fmt.Sprintf("line %d: %s: %s", e.Line, e.Key, e.Problem)
	case e.Line > 0:
		return fmt.Sprintf("line %d: %s", e.Line, e.Problem)
	case e.Key != "":
		return fmt.Sprintf("%s: %s", e.Key, e.Problem)
	}
	return e.Problem
}

// Load reads and checks the file at path; see Parse.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := Parse(b, os.LookupEnv)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// Parse reads a configuration strictly, expands ${NAME} with lookup, applies
// the defaults and validates. Errors are *Error values (joined when there
// are several), each naming its key and line.
func Parse(data []byte, lookup func(string) (string, bool)) (*Config, error) {
	doc, err := oneDocument(data)
	if err != nil {
		return nil, err
	}
	c := &Config{}
	lines := map[string]int{}
	var env envValues
	if len(doc.Content) > 0 {
		root := doc.Content[0]
		var errs []error
		expand(root, "", lookup, &env, &errs)
		checkKeys(root, reflect.TypeOf(*c), "", lines, &errs)
		refuseZeros(root, "", &errs)
		if len(errs) > 0 {
			return nil, env.hide(errors.Join(errs...))
		}
		if err := root.Decode(c); err != nil {
			return nil, env.hide(decodeErrors(err, lines))
		}
	}
	c.applyDefaults()
	if errs := c.validate(); len(errs) > 0 {
		for _, e := range errs {
			e.Line = lineOf(lines, e.Key)
		}
		out := make([]error, len(errs))
		for i, e := range errs {
			out[i] = e
		}
		return nil, env.hide(errors.Join(out...))
	}
	return c, nil
}

// oneDocument reads data as one YAML document. yaml.Unmarshal read the
// first and dropped the others without a word, so that the settings after
// a --- never applied while config check said ok; a document after the
// first that holds anything is refused naming its line.
func oneDocument(data []byte) (yaml.Node, error) {
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			return doc, nil
		}
		if err != nil {
			return doc, &Error{Line: yamlLine(err.Error()), Problem: stripLine(err.Error())}
		}
		if i == 0 {
			doc = n
			continue
		}
		if len(n.Content) == 1 && n.Content[0].Kind == yaml.ScalarNode && n.Content[0].ShortTag() == "!!null" && n.Content[0].Value == "" {
			continue // an empty document: a --- with nothing after it
		}
		return doc, &Error{Line: n.Line, Problem: "a second YAML document: the configuration is one document (remove the --- line before it, or move its keys into the first)"}
	}
}

// envValue is a scalar that took its value from the environment: at path
// on line, written ref (with its ${NAME}), now value.
type envValue struct {
	path  string
	line  int
	ref   string
	value string
}

// envValues are the scalars expanded from the environment, whose values an
// error must not quote: a value refused as the wrong type may be a secret
// put under the wrong key, or a variable meant for another key.
type envValues []envValue

// hide rewrites the problem of each *Error in err (joined or not) about a
// key or line that took a value from the environment, naming the variable
// (as written in the file) where the problem quoted the value, whole or as
// yaml cuts a long one ("s3cr3t-..."). Numbers, durations and booleans
// stay quoted: they are no secret, and "must be at least 1, got 0" must
// not become "must be at least ${N}, got ${N}". Other errors are returned
// as they are.
func (env envValues) hide(err error) error {
	if len(env) == 0 || err == nil {
		return err
	}
	var all []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		all = j.Unwrap()
	} else {
		all = []error{err}
	}
	for _, e := range all {
		var ce *Error
		if !errors.As(e, &ce) {
			continue
		}
		for _, v := range env {
			if plainValue(v.value) || v.path != ce.Key && v.line != ce.Line {
				continue
			}
			// As it is, and as %q spells it: a value holding a quote, a
			// backslash, a tab or a line break is escaped in the problem.
			for _, val := range []string{v.value, quotedInner(v.value)} {
				ce.Problem = strings.ReplaceAll(ce.Problem, val, v.ref)
				if len(val) > 10 {
					ce.Problem = strings.ReplaceAll(ce.Problem, val[:7]+"...", v.ref)
				}
			}
		}
	}
	return err
}

// quotedInner is s as strconv.Quote spells it, without the quotes.
func quotedInner(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// checkKeys walks n against the struct type t, reporting every key that t
// has no field for, and records each key's line under its path.
func checkKeys(n *yaml.Node, t reflect.Type, path string, lines map[string]int, errs *[]error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		// breaker: *retry took the retry's keys, unknown to a breaker,
		// without a word: an alias is checked as what it stands for.
		n = n.Alias
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if n.Kind != yaml.ScalarNode {
			return // Decode reports the type error
		}
		if t == configDurationType {
			// Decode would report it with its line only, which a flow
			// mapping ({base: 1s, max: 3x}) shares with other keys.
			var d Duration
			if err := d.UnmarshalYAML(n); err != nil {
				var ce *Error
				if errors.As(err, &ce) {
					ce.Key = path
				}
				*errs = append(*errs, err)
			}
			return
		}
		if t == durationType {
			return
		}
		switch n.ShortTag() {
		case "!!int", "!!null":
		case "!!float":
			// yaml.v3 would cut workers: 8.9 to 8.
			*errs = append(*errs, &Error{Key: path, Line: n.Line, Problem: fmt.Sprintf("must be a whole number, got %s", n.Value)})
		default:
			*errs = append(*errs, &Error{Key: path, Line: n.Line, Problem: fmt.Sprintf("must be a whole number, got %q", n.Value)})
		}
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return // Decode reports the type error
		}
		fields := map[string]reflect.Type{}
		for i := 0; i < t.NumField(); i++ {
			tag, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
			if tag != "" && tag != "-" {
				fields[tag] = t.Field(i).Type
			}
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			p := join(path, k.Value)
			lines[p] = k.Line
			ft, ok := fields[k.Value]
			if !ok {
				*errs = append(*errs, &Error{Key: p, Line: k.Line, Problem: "unknown key" + suggest(k.Value, fields)})
				continue
			}
			checkKeys(v, ft, p, lines, errs)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, v := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			lines[p] = v.Line
			checkKeys(v, t.Elem(), p, lines, errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			lines[join(path, n.Content[i].Value)] = n.Content[i].Line
		}
	}
}

// defaultedOnZero are the keys whose zero value means "the default"
// once the file is read (applyDefaults), with [] for any list index. A 0
// written there was silently replaced (timeout: 0s became 30 s); it is
// refused instead.
var defaultedOnZero = map[string]bool{
	"max_body_bytes": true, "request_timeout": true, "relay.workers": true, "relay.poll_interval": true, "relay.shutdown_timeout": true,
	"store.lease_duration": true, "store.instance_timeout": true,
	"destinations[].timeout": true, "destinations[].singled_out_after": true, "destinations[].retry.base": true, "destinations[].retry.multiplier": true,
	"destinations[].retry.max": true, "destinations[].retry.max_attempts": true,
	"destinations[].inner_retry.attempts": true, "destinations[].inner_retry.delay": true,
	"destinations[].breaker.max_failures": true, "destinations[].breaker.timeout": true,
	"destinations[].breaker.half_open_max_requests": true, "destinations[].rate_limit.burst": true,
}

var listIndex = regexp.MustCompile(`\[\d+\]`)

// refuseZeros reports a zero written for a key in defaultedOnZero.
// An alias of a scalar is checked as what it stands for: timeout: *z, z
// a 0s anchored where 0 is allowed, was taken as the default. (An alias
// of a mapping or list is not walked again: its keys were checked where
// it is anchored, and walking every alias of an alias bomb would take
// for ever.)
func refuseZeros(n *yaml.Node, path string, errs *[]error) {
	line := n.Line
	if n.Kind == yaml.AliasNode && n.Alias != nil && n.Alias.Kind == yaml.ScalarNode {
		n = n.Alias
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if defaultedOnZero[listIndex.ReplaceAllString(path, "[]")] && isZero(n.Value) {
			*errs = append(*errs, &Error{Key: path, Line: line,
				Problem: fmt.Sprintf("must be more than 0, got %s (leave the key out for the default)", n.Value)})
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			refuseZeros(n.Content[i+1], join(path, n.Content[i].Value), errs)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			refuseZeros(c, fmt.Sprintf("%s[%d]", path, i), errs)
		}
	}
}

// isZero reports whether a scalar spells zero, as a number or a duration.
func isZero(v string) bool {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		return f == 0
	}
	d, err := time.ParseDuration(v)
	return err == nil && d == 0
}

// durationType is time.Duration, an int64 that a config spells "30s".
var durationType = reflect.TypeOf(time.Duration(0))

// configDurationType is Duration, read by its UnmarshalYAML.
var configDurationType = reflect.TypeOf(Duration(0))

// lineOf returns the line of key, or of the nearest enclosing key that
// is in the file (a required key that is missing is reported on the line
// of its list item or mapping).
func lineOf(lines map[string]int, key string) int {
	for key != "" {
		if l, ok := lines[key]; ok {
			return l
		}
		i := strings.LastIndexAny(key, ".[")
		if i < 0 {
			return 0
		}
		key = key[:i]
	}
	return 0
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// suggest names the known keys when a key is unknown.
func suggest(key string, fields map[string]reflect.Type) string {
	names := make([]string, 0, len(fields))
	for f := range fields {
		names = append(names, f)
	}
	slicesSort(names)
	for _, f := range names {
		if distance(strings.ToLower(key), f) <= 2 {
			return fmt.Sprintf(" (did you mean %s?)", f)
		}
	}
	return " (known keys: " + strings.Join(names, ", ") + ")"
}

var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// expand replaces ${NAME} in every scalar value under n, whose key path is
// path. A variable that is not set is an error naming the key that holds
// it, even where a line holds several (a flow mapping).
func expand(n *yaml.Node, path string, lookup func(string) (string, bool), env *envValues, errs *[]error) {
	switch n.Kind {
	case yaml.ScalarNode:
		if !strings.Contains(n.Value, "${") {
			return
		}
		ref := envValue{path: path, line: n.Line, ref: n.Value}
		defer func() {
			ref.value = n.Value
			*env = append(*env, ref)
		}()
		var empty []string
		n.Value = envRef.ReplaceAllStringFunc(n.Value, func(ref string) string {
			name := envRef.FindStringSubmatch(ref)[1]
			v, ok := lookup(name)
			if !ok {
				*errs = append(*errs, &Error{Key: path, Line: n.Line,
					Problem: fmt.Sprintf("environment variable %s is not set", name)})
			}
			if ok && v == "" {
				empty = append(empty, name)
			}
			return v
		})
		if n.Value == "" && len(empty) > 0 && secretKey(path) {
			// An empty secret is no secret: a webhook's would send
			// unsigned requests. A deployment's empty variable is a
			// mistake, as an unset one is.
			*errs = append(*errs, &Error{Key: path, Line: n.Line,
				Problem: fmt.Sprintf("environment variable %s is set but empty", empty[0])})
		}
		switch {
		case n.Style&(yaml.DoubleQuotedStyle|yaml.SingleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) != 0:
			n.Tag = "!!str"
		case readsAsNull(n.Value):
			// The variable's text, not YAML's null: HOOK_SECRET=~ left
			// the webhook's secret empty (unsigned) without a word, and
			// WORKERS=null took the default.
			n.Tag = "!!str"
		default:
			// A plain value is read as what it now says, so that
			// workers: ${WORKERS} can be a number; a string key takes
			// any scalar as its text.
			n.Tag = ""
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 { // keys are not expanded
			expand(n.Content[i+1], join(path, n.Content[i].Value), lookup, env, errs)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			expand(c, fmt.Sprintf("%s[%d]", path, i), lookup, env, errs)
		}
	default:
		for _, c := range n.Content {
			expand(c, path, lookup, env, errs)
		}
	}
}

// readsAsNull reports whether YAML reads the plain scalar v as null
// (empty aside, which is the empty text wherever text is wanted).
func readsAsNull(v string) bool {
	switch v {
	case "~", "null", "Null", "NULL":
		return true
	}
	return false
}

// secretKey reports whether the key at path holds a secret or a token,
// which an empty value must not silently turn off.
func secretKey(path string) bool {
	last := path[strings.LastIndexAny(path, ".")+1:]
	if i := strings.IndexByte(last, '['); i >= 0 {
		last = last[:i]
	}
	last = strings.ToLower(last)
	return strings.Contains(last, "secret") || strings.Contains(last, "token") || strings.Contains(last, "password")
}

// keyAt returns the deepest key path on line, for messages about a value
// that give only a line; of several as deep (a flow mapping), the first in
// sort order, so that the same file always gets the same message.
func keyAt(lines map[string]int, line int) string {
	best := ""
	for p, l := range lines {
		if l == line && (len(p) > len(best) || len(p) == len(best) && p < best) {
			best = p
		}
	}
	return best
}

var lineRE = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

func yamlLine(msg string) int {
	if m := lineRE.FindStringSubmatch(msg); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}

func stripLine(msg string) string {
	return strings.TrimPrefix(lineRE.ReplaceAllString(msg, ""), "yaml: ")
}

// decodeErrors turns yaml's type errors into Errors naming their key.
func decodeErrors(err error, lines map[string]int) error {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	var de *Error
	if errors.As(err, &de) {
		if de.Key == "" {
			de.Key = keyAt(lines, de.Line)
		}
		return de
	}
	var out []error
	for _, m := range msgs {
		line := yamlLine(m)
		problem := stripLine(m)
		problem = strings.Replace(problem, "cannot unmarshal", "cannot read", 1)
		out = append(out, &Error{Key: keyAt(lines, line), Line: line, Problem: problem})
	}
	return errors.Join(out...)
}

// UnmarshalYAML reads a duration in Go syntax.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil || n.Kind != yaml.ScalarNode {
		return &Error{Line: n.Line, Problem: fmt.Sprintf("bad duration %q (want Go syntax such as 500ms, 30s, 5m, 1h)", n.Value)}
	}
	if v < 0 {
		return &Error{Line: n.Line, Problem: fmt.Sprintf("duration %q must not be negative", n.Value)}
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration in Go syntax.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// distance is the Levenshtein distance between a and b.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// plainValue reports whether v is empty, a number, a duration or a boolean:
// a value an error may quote.
func plainValue(v string) bool {
	v = strings.TrimSpace(v)
	if v == "" {
		return true
	}
	if _, err := strconv.ParseFloat(v, 64); err == nil {
		return true
	}
	if _, err := time.ParseDuration(v); err == nil {
		return true
	}
	switch strings.ToLower(v) {
	case "true", "false", "yes", "no", "on", "off":
		return true
	}
	return false
}
