package main

import (
	"flag"
	"fmt"
	"log/slog"
	"time"
)

// aliasValue is a deprecated spelling of a flag: setting it sets the flag
// it stands for, so that command lines written for an older release keep
// working; the command warns once it has parsed them (warnDeprecated).
type aliasValue struct {
	flag.Value // the new flag's
	name       string
}

func (a *aliasValue) String() string {
	if a == nil || a.Value == nil {
		return "" // the zero value flag.PrintDefaults makes
	}
	return a.Value.String()
}

func (a *aliasValue) IsBoolFlag() bool {
	b, ok := a.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// deprecatedAlias defines old as a deprecated spelling of the flag name,
// which must be defined already.
func deprecatedAlias(fs *flag.FlagSet, old, name string) {
	f := fs.Lookup(name)
	if f == nil {
		panic("deprecatedAlias: no flag --" + name) // a programming error, caught by every test of the command
	}
	fs.Var(&aliasValue{Value: f.Value, name: name}, old, "deprecated: use --"+name)
	fs.Lookup(old).DefValue = "" // the new flag's help shows the default
}

// deprecations returns a one-line warning for each deprecated spelling the
// command line used.
func deprecations(fs *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) {
		if a, ok := f.Value.(*aliasValue); ok {
			out = append(out, fmt.Sprintf("--%s is deprecated; use --%s", f.Name, a.name))
		}
	})
	return out
}

// warnDeprecated logs the deprecations of a command that logs.
func warnDeprecated(fs *flag.FlagSet, log *slog.Logger) {
	for _, d := range deprecations(fs) {
		log.Warn(d)
	}
}

// flagError is a flag value refused as it was set: the flag, the value
// and the rule, for a message of one line.
type flagError struct{ name, value, rule string }

func (e *flagError) Error() string { return fmt.Sprintf("--%s %q: %s", e.name, e.value, e.rule) }

// checkedValue records in failed the first value its flag refuses.
type checkedValue struct {
	flag.Value
	name   string
	failed *flagError
}

func (v *checkedValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && v.failed.name == "" {
		*v.failed = flagError{name: v.name, value: s, rule: valueRule(v.Value, err)}
	}
	return err
}

// valueRule says what a flag of v's kind takes.
func valueRule(v flag.Value, err error) string {
	if a, ok := v.(*aliasValue); ok {
		v = a.Value
	}
	if g, ok := v.(flag.Getter); ok {
		switch g.Get().(type) {
		case time.Duration:
			return "want a duration with a unit, such as 500ms, 15s or 2m"
		case int, int64:
			return "want a whole number"
		case uint, uint64:
			return "want a whole number, 0 or more"
		case float64:
			return "want a number"
		}
	}
	return err.Error()
}

// checkFlagValues makes every flag of fs but the booleans (whose values
// the flag package parses apart) record in failed the value it refuses;
// restore puts the flags back as they were.
func checkFlagValues(fs *flag.FlagSet, failed *flagError) (restore func()) {
	var undo []func()
	fs.VisitAll(func(f *flag.Flag) {
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			return
		}
		orig := f.Value
		f.Value = &checkedValue{Value: orig, name: f.Name, failed: failed}
		undo = append(undo, func() { f.Value = orig })
	})
	return func() {
		for _, u := range undo {
			u()
		}
		undo = nil
	}
}

// flagGiven reports whether the command line set the flag name.
func flagGiven(fs *flag.FlagSet, name string) bool {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == name })
	return given
}
