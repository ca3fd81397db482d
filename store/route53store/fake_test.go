package route53store_test

import (
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/route53"
)

// fakeRoute53 is an in-memory Route 53 with the semantics the AWS
// documentation gives ChangeResourceRecordSets, which moto does not have:
// a batch is validated as a whole and applied atomically or not at all; a
// CREATE of an existing record set fails ("but it already exists"); a
// DELETE must name the record set's exact TTL and values ("but the values
// provided do not match the current values", "but it was not found").
// ListResourceRecordSets orders names label by label from the right, then
// by type. It serves one hosted zone, with its NS and SOA records.
//
// hook, if set, runs before each request and may answer it itself (return
// true), to inject faults.
type fakeRoute53 struct {
	srv      *httptest.Server
	zoneID   string
	zoneName string // "example.test."

	mu      sync.Mutex
	records map[string]fakeSet // name + " " + type
	changes int                // change batches received
	lists   int                // list requests received
	hook    func(w http.ResponseWriter, r *http.Request) bool
}

type fakeSet struct {
	Name   string
	Type   string
	TTL    int64
	Values []string
}

func newFakeRoute53(t testing.TB) *fakeRoute53 {
	f := &fakeRoute53{zoneID: "ZFAKE0123456789", zoneName: "example.test.", records: map[string]fakeSet{}}
	f.records["example.test. NS"] = fakeSet{"example.test.", "NS", 172800, []string{"ns-1.awsdns-01.org."}}
	f.records["example.test. SOA"] = fakeSet{"example.test.", "SOA", 900, []string{"ns-1.awsdns-01.org. hostmaster.example.test. 1 7200 900 1209600 86400"}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// client returns an SDK client for the fake, with the SDK's default
// retryer.
func (f *fakeRoute53) client() *route53.Client {
	return route53.New(route53.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.srv.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("AKID", "SECRET", ""),
		HTTPClient:   f.srv.Client(),
	})
}

func (f *fakeRoute53) setHook(h func(w http.ResponseWriter, r *http.Request) bool) {
	f.mu.Lock()
	f.hook = h
	f.mu.Unlock()
}

func (f *fakeRoute53) counts() (changes, lists int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.changes, f.lists
}

// put stores a record set directly, as another program would.
func (f *fakeRoute53) put(set fakeSet) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.records[set.Name+" "+set.Type] = set
}

func (f *fakeRoute53) get(name, typ string) (fakeSet, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.records[name+" "+typ]
	return s, ok
}

const r53NS = "https://route53.amazonaws.com/doc/2013-04-01/"

func (f *fakeRoute53) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	hook := f.hook
	f.mu.Unlock()
	if hook != nil && hook(w, r) {
		return
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/2013-04-01/hostedzone/")
	if !ok {
		r53Error(w, 404, "InvalidInput", "unknown path "+r.URL.Path)
		return
	}
	id, sub, _ := strings.Cut(rest, "/")
	if id != f.zoneID {
		r53Error(w, 404, "NoSuchHostedZone", "No hosted zone found with ID: "+id)
		return
	}
	switch {
	case sub == "" && r.Method == http.MethodGet:
		writeXML(w, fmt.Sprintf(`<GetHostedZoneResponse xmlns="%s"><HostedZone><Id>/hostedzone/%s</Id><Name>%s</Name><CallerReference>fake</CallerReference><ResourceRecordSetCount>2</ResourceRecordSetCount></HostedZone></GetHostedZoneResponse>`,
			r53NS, f.zoneID, f.zoneName))
	case sub == "rrset" && r.Method == http.MethodGet:
		f.list(w, r)
	case sub == "rrset" && r.Method == http.MethodPost:
		f.change(w, r)
	default:
		r53Error(w, 400, "InvalidInput", "unsupported "+r.Method+" "+r.URL.Path)
	}
}

func writeXML(w http.ResponseWriter, body string) {
	w.Header().Set("Content-Type", "text/xml")
	_, _ = io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?>`+"\n"+body)
}

// r53Error writes an error as Route 53 does.
func r53Error(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0"?>
<ErrorResponse xmlns="%s"><Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error><RequestId>REQ123</RequestId></ErrorResponse>`,
		r53NS, code, xmlEscape(msg))
}

// invalidChangeBatch writes Route 53's own form of an InvalidChangeBatch
// error.
func invalidChangeBatch(w http.ResponseWriter, msgs ...string) {
	w.Header().Set("Content-Type", "text/xml")
	w.WriteHeader(400)
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<Message>" + xmlEscape(m) + "</Message>")
	}
	fmt.Fprintf(w, `<?xml version="1.0"?>
<InvalidChangeBatch xmlns="%s"><Messages>%s</Messages><RequestId>REQ123</RequestId></InvalidChangeBatch>`, r53NS, b.String())
}

func xmlEscape(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// dnsLess orders names as Route 53 documents: labels compared from the
// right.
func dnsLess(a, b string) int {
	la := strings.Split(strings.TrimSuffix(a, "."), ".")
	lb := strings.Split(strings.TrimSuffix(b, "."), ".")
	slices.Reverse(la)
	slices.Reverse(lb)
	return slices.Compare(la, lb)
}

func (f *fakeRoute53) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	start := strings.ToLower(q.Get("name"))
	if start != "" && !strings.HasSuffix(start, ".") {
		start += "."
	}
	startType := q.Get("type")
	maxItems := 300
	if m := q.Get("maxitems"); m != "" {
		maxItems, _ = strconv.Atoi(m)
	}
	f.mu.Lock()
	f.lists++
	sets := make([]fakeSet, 0, len(f.records))
	for _, s := range f.records {
		sets = append(sets, s)
	}
	f.mu.Unlock()
	slices.SortFunc(sets, func(a, b fakeSet) int {
		if c := dnsLess(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Type, b.Type)
	})
	i := 0
	if start != "" {
		for i < len(sets) {
			c := dnsLess(sets[i].Name, start)
			if c > 0 || c == 0 && sets[i].Type >= startType {
				break
			}
			i++
		}
	}
	sets = sets[i:]
	var b strings.Builder
	fmt.Fprintf(&b, `<ListResourceRecordSetsResponse xmlns="%s"><ResourceRecordSets>`, r53NS)
	for _, s := range sets[:min(maxItems, len(sets))] {
		fmt.Fprintf(&b, "<ResourceRecordSet><Name>%s</Name><Type>%s</Type><TTL>%d</TTL><ResourceRecords>", xmlEscape(s.Name), s.Type, s.TTL)
		for _, v := range s.Values {
			fmt.Fprintf(&b, "<ResourceRecord><Value>%s</Value></ResourceRecord>", xmlEscape(v))
		}
		b.WriteString("</ResourceRecords></ResourceRecordSet>")
	}
	b.WriteString("</ResourceRecordSets>")
	if len(sets) > maxItems {
		next := sets[maxItems]
		fmt.Fprintf(&b, "<IsTruncated>true</IsTruncated><NextRecordName>%s</NextRecordName><NextRecordType>%s</NextRecordType>", xmlEscape(next.Name), next.Type)
	} else {
		b.WriteString("<IsTruncated>false</IsTruncated>")
	}
	fmt.Fprintf(&b, "<MaxItems>%d</MaxItems></ListResourceRecordSetsResponse>", maxItems)
	writeXML(w, b.String())
}

type changeRequest struct {
	Changes []struct {
		Action string `xml:"Action"`
		Set    struct {
			Name   string   `xml:"Name"`
			Type   string   `xml:"Type"`
			TTL    int64    `xml:"TTL"`
			Values []string `xml:"ResourceRecords>ResourceRecord>Value"`
		} `xml:"ResourceRecordSet"`
	} `xml:"ChangeBatch>Changes>Change"`
}

func (f *fakeRoute53) change(w http.ResponseWriter, r *http.Request) {
	var req changeRequest
	if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
		r53Error(w, 400, "InvalidInput", err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.changes++
	// Validate the whole batch against a working copy, then commit it.
	work := map[string]fakeSet{}
	for k, v := range f.records {
		work[k] = v
	}
	var errs []string
	for _, c := range req.Changes {
		name := strings.ToLower(c.Set.Name)
		if !strings.HasSuffix(name, ".") {
			name += "."
		}
		if !strings.HasSuffix(name, "."+f.zoneName) {
			r53Error(w, 400, "InvalidChangeBatch", "RRSet with DNS name "+name+" is not permitted in zone "+f.zoneName)
			return
		}
		for _, v := range c.Set.Values {
			if c.Set.Type == "TXT" && len(v) > 4000 {
				invalidChangeBatch(w, "Invalid Resource Record: FATAL problem: TXTRDATATooLong")
				return
			}
		}
		key := name + " " + c.Set.Type
		cur, exists := work[key]
		desc := fmt.Sprintf("[name='%s', type='%s']", name, c.Set.Type)
		switch c.Action {
		case "CREATE":
			if exists {
				errs = append(errs, "Tried to create resource record set "+desc+" but it already exists")
				continue
			}
			work[key] = fakeSet{Name: name, Type: c.Set.Type, TTL: c.Set.TTL, Values: c.Set.Values}
		case "DELETE":
			switch {
			case !exists:
				errs = append(errs, "Tried to delete resource record set "+desc+" but it was not found")
			case cur.TTL != c.Set.TTL || !slices.Equal(sorted(cur.Values), sorted(c.Set.Values)):
				errs = append(errs, "Tried to delete resource record set "+desc+" but the values provided do not match the current values")
			default:
				delete(work, key)
			}
		default:
			r53Error(w, 400, "InvalidInput", "unsupported action "+c.Action)
			return
		}
	}
	if len(errs) > 0 {
		invalidChangeBatch(w, errs...)
		return
	}
	f.records = work
	writeXML(w, fmt.Sprintf(`<ChangeResourceRecordSetsResponse xmlns="%s"><ChangeInfo><Id>/change/C%d</Id><Status>PENDING</Status><SubmittedAt>2026-01-01T00:00:00Z</SubmittedAt></ChangeInfo></ChangeResourceRecordSetsResponse>`,
		r53NS, f.changes))
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
