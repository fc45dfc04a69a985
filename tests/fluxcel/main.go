// Command fluxcel evaluates Flux healthCheckExprs on one object the way kustomize-controller
// does (fluxcd/pkg runtime/cel: the same CEL environment and StatusEvaluator order). It reads
// {"expressions": {"current", "inProgress", "failed"}, "object": {...}} on stdin and prints
// Current, InProgress or Failed; an expression that fails to evaluate exits 3 with the error,
// which Flux reports as Unknown and keeps waiting.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
)

type input struct {
	Expressions map[string]string `json:"expressions"`
	Object      map[string]any    `json:"object"`
}

func main() {
	var in input
	decoder := json.NewDecoder(os.Stdin)
	decoder.UseNumber()
	if err := decoder.Decode(&in); err != nil {
		fail(2, err)
	}
	object := normalize(in.Object).(map[string]any)
	if observed, ok := nested(object, "status", "observedGeneration").(int64); ok {
		if generation, ok := nested(object, "metadata", "generation").(int64); ok && observed != generation {
			fmt.Println("InProgress")
			return
		}
	}
	for _, step := range []struct{ key, status string }{
		{"inProgress", "InProgress"}, {"failed", "Failed"}, {"current", "Current"},
	} {
		expr := in.Expressions[step.key]
		if expr == "" {
			continue
		}
		if evaluate(expr, object) {
			fmt.Println(step.status)
			return
		}
	}
	fmt.Println("InProgress")
}

func evaluate(expr string, object map[string]any) bool {
	env, err := cel.NewEnv(
		cel.HomogeneousAggregateLiterals(),
		cel.EagerlyValidateDeclarations(true),
		cel.DefaultUTCTimeZone(true),
		cel.CrossTypeNumericComparisons(true),
		cel.OptionalTypes(),
		ext.Strings(),
		ext.Sets(),
		ext.Encoders(),
	)
	if err != nil {
		fail(2, err)
	}
	ast, issues := env.Parse(expr)
	if issues != nil {
		fail(2, issues.Err())
	}
	program, err := env.Program(ast, cel.EvalOptions(cel.OptOptimize), cel.InterruptCheckFrequency(100))
	if err != nil {
		fail(2, err)
	}
	value, _, err := program.Eval(object)
	if err != nil {
		fail(3, err)
	}
	result, ok := value.(types.Bool)
	if !ok {
		fail(2, fmt.Errorf("%q is not a boolean expression", expr))
	}
	return bool(result)
}

// normalize turns JSON numbers into int64 or float64, as Kubernetes' unstructured decoding does.
func normalize(value any) any {
	switch v := value.(type) {
	case map[string]any:
		for key, item := range v {
			v[key] = normalize(item)
		}
	case []any:
		for i, item := range v {
			v[i] = normalize(item)
		}
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return i
		}
		f, _ := v.Float64()
		return f
	}
	return value
}

func nested(object map[string]any, keys ...string) any {
	var current any = object
	for _, key := range keys {
		m, ok := current.(map[string]any)
		if !ok {
			return nil
		}
		current = m[key]
	}
	return current
}

func fail(code int, err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(code)
}
