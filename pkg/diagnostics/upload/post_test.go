package upload

import (
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func policyDocB64(exp string, conds string) string {
	return base64.StdEncoding.EncodeToString([]byte(`{"expiration":"` + exp + `","conditions":[` + conds + `]}`))
}

func goodFields() map[string]string {
	return map[string]string{
		"key":             "captures/n1/${filename}",
		"policy":          policyDocB64("2030-01-01T00:00:00Z", `{"bucket":"b"},["starts-with","$key","captures/n1/"],["content-length-range",1,70000000]`),
		"X-Amz-Algorithm": "AWS4-HMAC-SHA256", "X-Amz-Credential": "AKIA/20300101/eu-west-1/s3/aws4_request",
		"X-Amz-Date": "20300101T000000Z", "X-Amz-Signature": "abc",
	}
}

// TestCheckPostFields: a POST policy is refused before anything is
// captured when S3 would refuse every chunk, or when its fields could
// change where the answer goes or how the form is read.
func TestCheckPostFields(t *testing.T) {
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	if err := CheckPostFields(goodFields(), now, "c-00000.pcap.gz", 64<<20); err != nil {
		t.Fatalf("the SDK's kind of policy refused: %v", err)
	}
	for _, c := range []struct {
		name string
		mut  func(map[string]string)
		want string
	}{
		{"no ${filename}", func(f map[string]string) { f["key"] = "captures/n1/c.pcap.gz" }, "has no ${filename}"},
		{"expired", func(f map[string]string) { f["policy"] = policyDocB64("2020-01-01T00:00:00Z", "") }, "expired"},
		{"other prefix", func(f map[string]string) { f["key"] = "elsewhere/${filename}" }, "keys starting with"},
		{"exact other key", func(f map[string]string) { f["policy"] = policyDocB64("2030-01-01T00:00:00Z", `{"key":"a/b"}`) }, "only the key"},
		{"chunks too big", func(f map[string]string) {
			f["policy"] = policyDocB64("2030-01-01T00:00:00Z", `["content-length-range",1,1048576]`)
		}, "allows objects up to"},
		{"redirect", func(f map[string]string) { f["success_action_redirect"] = "https://evil.example.com/" }, "is not one of"},
		{"the file itself", func(f map[string]string) { f["file"] = "x" }, "is not one of"},
		{"header injection", func(f map[string]string) { f["acl\r\nX"] = "private" }, "letters, digits"},
		{"line break in a value", func(f map[string]string) { f["acl"] = "private\r\n--boundary" }, "line break"},
		{"no signature", func(f map[string]string) { delete(f, "X-Amz-Signature") }, "x-amz-signature is missing"},
		{"SigV2", func(f map[string]string) { f["X-Amz-Algorithm"] = "AWS-HMAC-SHA1" }, "signature version 4"},
		{"not base64", func(f map[string]string) { f["policy"] = "%%%" }, "not base64"},
		{"twice", func(f map[string]string) { f["KEY"] = "x/${filename}" }, "given twice"},
	} {
		f := goodFields()
		c.mut(f)
		err := CheckPostFields(f, now, "c-00000.pcap.gz", 64<<20)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", c.name, err, c.want)
		}
	}
}

// TestPostEnvelope: the key's ${filename} is the chunk's name, the file
// part comes last, and the closing boundary ends the body.
func TestPostEnvelope(t *testing.T) {
	head, tail, ct, err := postEnvelope(goodFields(), "c-00003.pcap.gz")
	if err != nil {
		t.Fatal(err)
	}
	h := string(head)
	if !strings.Contains(h, "captures/n1/c-00003.pcap.gz") || strings.Contains(h, "${filename}") {
		t.Errorf("key not filled in:\n%s", h)
	}
	if i, j := strings.Index(h, `name="policy"`), strings.Index(h, `name="file"; filename="c-00003.pcap.gz"`); i < 0 || j < i {
		t.Errorf("the file part is not last:\n%s", h)
	}
	boundary := strings.TrimPrefix(ct, "multipart/form-data; boundary=")
	if !strings.HasSuffix(string(tail), "--"+boundary+"--\r\n") {
		t.Errorf("tail %q", tail)
	}
}
