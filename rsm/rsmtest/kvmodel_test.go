package rsmtest_test

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/tenure-io/tenure/rsm/rsmtest"
)

type kvOp struct {
	client    int
	call, ret int64
	in        rsmtest.KVInput
	out       rsmtest.KVOutput
}

func put(k, v string) rsmtest.KVInput { return rsmtest.KVInput{Op: rsmtest.KVPut, Key: k, Value: v} }
func get(k string) rsmtest.KVInput    { return rsmtest.KVInput{Op: rsmtest.KVGet, Key: k} }
func del(k string) rsmtest.KVInput    { return rsmtest.KVInput{Op: rsmtest.KVDelete, Key: k} }
func cas(k string, expect uint64, v string) rsmtest.KVInput {
	return rsmtest.KVInput{Op: rsmtest.KVCAS, Key: k, Expect: expect, Value: v}
}
func rev(r uint64) rsmtest.KVOutput { return rsmtest.KVOutput{Rev: r} }
func found(v string, mod, create uint64) rsmtest.KVOutput {
	return rsmtest.KVOutput{Found: true, Value: v, Rev: mod, Create: create}
}

var (
	absent  = rsmtest.KVOutput{}
	unknown = rsmtest.KVOutput{Unknown: true}
)

func ops(list ...kvOp) []porcupine.Operation {
	var out []porcupine.Operation
	for _, o := range list {
		out = append(out, porcupine.Operation{ClientId: o.client, Input: o.in, Output: o.out, Call: o.call, Return: o.ret})
	}
	return out
}

func TestKVModel(t *testing.T) {
	P := rsmtest.Pending
	tests := []struct {
		name string
		ops  []porcupine.Operation
		want porcupine.CheckResult
	}{
		{"sequential", ops(
			kvOp{0, 0, 1, put("a", "v1"), rev(1)},
			kvOp{0, 2, 3, get("a"), found("v1", 1, 1)},
			kvOp{0, 4, 5, cas("a", 1, "v2"), rsmtest.KVOutput{Found: true, Rev: 2}},
			kvOp{0, 6, 7, get("a"), found("v2", 2, 1)},
			kvOp{0, 8, 9, cas("a", 1, "v3"), rsmtest.KVOutput{Found: false, Rev: 2}},
			kvOp{0, 10, 11, del("a"), rsmtest.KVOutput{Found: true, Rev: 5}},
			kvOp{0, 12, 13, get("a"), absent},
			kvOp{0, 14, 15, del("a"), rsmtest.KVOutput{Found: false, Rev: 7}},
			kvOp{0, 16, 17, cas("a", 0, "v4"), rsmtest.KVOutput{Found: true, Rev: 8}},
			kvOp{0, 18, 19, get("a"), found("v4", 8, 8)},
		), porcupine.Ok},
		{"stale read", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{0, 20, 30, put("a", "v2"), rev(2)},
			kvOp{1, 40, 50, get("a"), found("v1", 1, 1)},
		), porcupine.Illegal},
		{"concurrent puts ordered by revision", ops(
			kvOp{0, 0, 100, put("a", "v1"), rev(1)},
			kvOp{1, 10, 90, put("a", "v2"), rev(2)},
			kvOp{2, 110, 120, get("a"), found("v1", 1, 1)},
		), porcupine.Illegal},
		{"concurrent puts, last revision wins", ops(
			kvOp{0, 0, 100, put("a", "v1"), rev(1)},
			kvOp{1, 10, 90, put("a", "v2"), rev(2)},
			kvOp{2, 110, 120, get("a"), found("v2", 2, 1)},
		), porcupine.Ok},
		{"revision goes back", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(5)},
			kvOp{0, 20, 30, put("a", "v2"), rev(3)},
		), porcupine.Illegal},
		{"revision goes back across a delete", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(5)},
			kvOp{0, 20, 30, del("a"), rsmtest.KVOutput{Found: true, Rev: 6}},
			kvOp{0, 40, 50, put("a", "v2"), rev(6)},
		), porcupine.Illegal},
		{"pending write seen later", ops(
			kvOp{0, 0, P, put("a", "v1"), unknown},
			kvOp{1, 10, 20, get("a"), absent},
			kvOp{1, 30, 40, get("a"), found("v1", 4, 4)},
			kvOp{1, 50, 60, get("a"), found("v1", 4, 4)},
		), porcupine.Ok},
		{"pending write seen then unseen", ops(
			kvOp{0, 0, P, put("a", "v1"), unknown},
			kvOp{1, 10, 20, get("a"), found("v1", 4, 4)},
			kvOp{1, 30, 40, get("a"), absent},
		), porcupine.Illegal},
		{"pending write's revision fixed by the first read", ops(
			kvOp{0, 0, P, put("a", "v1"), unknown},
			kvOp{1, 10, 20, get("a"), found("v1", 4, 4)},
			kvOp{1, 30, 40, get("a"), found("v1", 5, 4)},
		), porcupine.Illegal},
		{"pending write never seen", ops(
			kvOp{0, 0, 10, put("a", "v0"), rev(1)},
			kvOp{0, 20, P, put("a", "v1"), unknown},
			kvOp{1, 30, 40, get("a"), found("v0", 1, 1)},
		), porcupine.Ok},
		{"applied write whose result is lost", ops(
			kvOp{0, 0, 10, put("a", "v1"), unknown},
			kvOp{1, 20, 30, get("a"), absent},
		), porcupine.Illegal},
		{"cas on a revision no read saw", ops(
			kvOp{0, 0, P, put("a", "v1"), unknown},
			kvOp{1, 10, 20, cas("a", 3, "v2"), rsmtest.KVOutput{Found: false, Rev: 9}},
			kvOp{1, 30, 40, get("a"), found("v1", 9, 9)},
		), porcupine.Ok},
		{"failed cas fixes the revision", ops(
			kvOp{0, 0, P, put("a", "v1"), unknown},
			kvOp{1, 10, 20, cas("a", 3, "v2"), rsmtest.KVOutput{Found: false, Rev: 9}},
			kvOp{1, 30, 40, get("a"), found("v1", 8, 8)},
		), porcupine.Illegal},
		{"cas that should have swapped", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{0, 20, 30, cas("a", 1, "v2"), rsmtest.KVOutput{Found: false, Rev: 1}},
		), porcupine.Illegal},
		{"pending cas applies only if its condition held", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{0, 20, P, cas("a", 7, "v2"), unknown},
			kvOp{1, 30, 40, get("a"), found("v2", 9, 1)},
		), porcupine.Illegal},
		{"keys are independent", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{1, 0, 10, put("b", "w1"), rev(2)},
			kvOp{0, 20, 30, get("b"), found("w1", 2, 2)},
			kvOp{1, 20, 30, get("a"), found("v1", 1, 1)},
		), porcupine.Ok},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := porcupine.CheckOperationsTimeout(rsmtest.KVModel, tt.ops, 10*time.Second); got != tt.want {
				t.Errorf("got %s, want %s", got, tt.want)
			}
		})
	}
}

func TestCheckKVRevisions(t *testing.T) {
	tests := []struct {
		name string
		ops  []porcupine.Operation
		bad  bool
	}{
		{"fine", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{1, 5, 15, put("b", "w1"), rev(2)},
			kvOp{0, 20, 30, del("c"), rsmtest.KVOutput{Rev: 2}},
		), false},
		{"shared revision", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{1, 5, 15, put("b", "w1"), rev(1)},
		), true},
		{"read of another key's revision", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(1)},
			kvOp{1, 20, 30, get("b"), found("w1", 1, 1)},
		), true},
		{"revision against real time", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(5)},
			kvOp{1, 20, 30, put("b", "w1"), rev(3)},
		), true},
		{"current revision against real time", ops(
			kvOp{0, 0, 10, put("a", "v1"), rev(5)},
			kvOp{1, 20, 30, del("b"), rsmtest.KVOutput{Rev: 4}},
		), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bad := rsmtest.CheckKVRevisions(tt.ops)
			if (len(bad) > 0) != tt.bad {
				t.Errorf("violations %q, want some: %v", bad, tt.bad)
			}
		})
	}
}
