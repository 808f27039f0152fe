package upload

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"
)

// FilenameVar in a POST policy's key is replaced by the uploaded file's
// name (S3's own convention for browser uploads).
const FilenameVar = "${filename}"

// PostPolicy is an S3 presigned POST policy: the bucket URL and the form
// fields that carry the signed policy document.
type PostPolicy struct {
	URL    string
	Fields map[string]string
}

// Limits of a POST policy's fields.
const (
	maxPostFields     = 32
	maxPostFieldBytes = 8 << 10
	maxPostFormBytes  = 64 << 10
)

// validFieldName: letters, digits, '_', '.' and '-', at most 128, not
// starting with a punctuation mark (a form field's name goes into a
// Content-Disposition header).
func validFieldName(k string) bool {
	if k == "" || len(k) > 128 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if !alnum && (i == 0 || (c != '_' && c != '.' && c != '-')) {
			return false
		}
	}
	return true
}

// postFieldAllowed says which form fields a policy may carry. The rest of
// S3's fields either change where the answer goes (success_action_redirect:
// the agent would be sent elsewhere) or are not S3's at all.
func postFieldAllowed(lower string) bool {
	switch lower {
	case "key", "policy", "acl", "success_action_status", "content-type", "cache-control", "content-disposition",
		"content-encoding", "expires", "tagging":
		return true
	}
	return strings.HasPrefix(lower, "x-amz-")
}

// field returns the value of a field whatever the case of its name (S3's
// field names are case-insensitive).
func (p PostPolicy) field(name string) (string, bool) {
	for k, v := range p.Fields {
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// Check validates the policy before anything is captured: the address
// (as for a PUT), the fields (names, sizes, the signature's fields), the
// key (with ${filename}, so one policy takes every chunk), and the policy
// document: not expired at now, allowing sampleName's key, and allowing
// objects of size bytes.
func (u *Uploader) CheckPost(p PostPolicy, now time.Time, sampleName string, size int64) error {
	if _, err := u.Policy.CheckURL(p.URL); err != nil {
		return err
	}
	return CheckPostFields(p.Fields, now, sampleName, size)
}

// CheckPostFields is CheckPost's check of the fields.
func CheckPostFields(fields map[string]string, now time.Time, sampleName string, size int64) error {
	if len(fields) > maxPostFields {
		return fmt.Errorf("%d form fields, at most %d", len(fields), maxPostFields)
	}
	total := 0
	seen := map[string]bool{}
	for k, v := range fields {
		lower := strings.ToLower(k)
		switch {
		case !validFieldName(k):
			return fmt.Errorf("form field name %q: letters, digits, '_', '.' and '-' only", k)
		case seen[lower]:
			return fmt.Errorf("form field %q given twice", k)
		case !postFieldAllowed(lower):
			return fmt.Errorf("form field %q is not one of an S3 POST policy's", k)
		case len(v) > maxPostFieldBytes:
			return fmt.Errorf("form field %q is longer than %d bytes", k, maxPostFieldBytes)
		case strings.ContainsAny(v, "\r\n\x00"):
			return fmt.Errorf("form field %q holds a line break or NUL", k)
		}
		seen[lower] = true
		total += len(k) + len(v)
	}
	if total > maxPostFormBytes {
		return fmt.Errorf("the form fields hold %d bytes, at most %d", total, maxPostFormBytes)
	}
	p := PostPolicy{Fields: fields}
	for _, f := range []string{"key", "policy", "x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature"} {
		if v, ok := p.field(f); !ok || v == "" {
			return fmt.Errorf("form field %s is missing", f)
		}
	}
	if alg, _ := p.field("x-amz-algorithm"); alg != "AWS4-HMAC-SHA256" {
		return fmt.Errorf("x-amz-algorithm %q: want AWS4-HMAC-SHA256 (signature version 4)", alg)
	}
	key, _ := p.field("key")
	if !strings.Contains(key, FilenameVar) {
		return fmt.Errorf("the key %q has no %s: every chunk would overwrite the last", key, FilenameVar)
	}
	raw, _ := p.field("policy")
	doc, err := parsePolicy(raw)
	if err != nil {
		return err
	}
	if !doc.expiration.After(now) {
		return fmt.Errorf("the upload policy expired at %s", doc.expiration.UTC().Format(time.RFC3339))
	}
	sampleKey := strings.ReplaceAll(key, FilenameVar, sampleName)
	if err := doc.allowsKey(sampleKey); err != nil {
		return err
	}
	if doc.maxLength >= 0 && size > doc.maxLength {
		return fmt.Errorf("the upload policy allows objects up to %d bytes; chunks are %d bytes", doc.maxLength, size)
	}
	return nil
}

type policyDoc struct {
	expiration time.Time
	conditions []any
	maxLength  int64
}

func parsePolicy(raw string) (policyDoc, error) {
	data, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		return policyDoc{}, fmt.Errorf("the policy field is not base64: %w", err)
	}
	var d struct {
		Expiration string `json:"expiration"`
		Conditions []any  `json:"conditions"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return policyDoc{}, fmt.Errorf("the policy document is not JSON: %w", err)
	}
	exp, err := time.Parse(time.RFC3339, d.Expiration)
	if err != nil {
		return policyDoc{}, fmt.Errorf("the policy's expiration %q: %w", d.Expiration, err)
	}
	doc := policyDoc{expiration: exp, conditions: d.Conditions, maxLength: -1}
	for _, c := range d.Conditions {
		if l, ok := c.([]any); ok && len(l) == 3 && l[0] == "content-length-range" {
			if maxLen, ok := l[2].(float64); ok {
				doc.maxLength = int64(maxLen)
			}
		}
	}
	return doc, nil
}

// allowsKey checks the policy's conditions on the key: {"key": v},
// ["eq", "$key", v] and ["starts-with", "$key", prefix]. S3 checks the key
// after ${filename} is replaced, as the agent sends it.
func (d policyDoc) allowsKey(key string) error {
	for _, c := range d.conditions {
		switch c := c.(type) {
		case map[string]any:
			for k, v := range c {
				if strings.EqualFold(k, "key") && v != key {
					return fmt.Errorf("the upload policy allows only the key %q, not %q", v, key)
				}
			}
		case []any:
			if len(c) != 3 || !strings.EqualFold(fmt.Sprint(c[1]), "$key") {
				continue
			}
			v := fmt.Sprint(c[2])
			switch c[0] {
			case "eq":
				if v != key {
					return fmt.Errorf("the upload policy allows only the key %q, not %q", v, key)
				}
			case "starts-with":
				if !strings.HasPrefix(key, v) {
					return fmt.Errorf("the upload policy allows keys starting with %q, not %q", v, key)
				}
			}
		}
	}
	return nil
}

// PostFile uploads the file at path as name with the POST policy p: its
// fields (with ${filename} in the key replaced by name) and the file last,
// as multipart/form-data, streamed from disk. Retries as PutFile.
func (u *Uploader) PostFile(ctx context.Context, p PostPolicy, name, path string) (int64, error) {
	head, tail, contentType, err := postEnvelope(p.Fields, name)
	if err != nil {
		return 0, err
	}
	return u.deliver(ctx, p.URL, path, http.MethodPost, func(ctx context.Context, target *url.URL, size int64) (*http.Request, error) {
		f, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		body := io.MultiReader(bytes.NewReader(head), io.LimitReader(f, size), bytes.NewReader(tail))
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, target.String(), struct {
			io.Reader
			io.Closer
		}{body, f})
		if err != nil {
			f.Close()
			return nil, err
		}
		// S3 wants the length of a POST up front.
		req.ContentLength = int64(len(head)) + size + int64(len(tail))
		req.Header.Set("Content-Type", contentType)
		return req, nil
	})
}

// postEnvelope is the multipart form around the file: the fields in a
// stable order, then the file part's header (head), and the closing
// boundary (tail).
func postEnvelope(fields map[string]string, name string) (head, tail []byte, contentType string, err error) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := fields[k]
		if strings.EqualFold(k, "key") {
			v = strings.ReplaceAll(v, FilenameVar, name)
		}
		if err := w.WriteField(k, v); err != nil {
			return nil, nil, "", err
		}
	}
	if _, err := w.CreateFormFile("file", name); err != nil {
		return nil, nil, "", err
	}
	head = append([]byte(nil), b.Bytes()...)
	b.Reset()
	if err := w.Close(); err != nil {
		return nil, nil, "", err
	}
	return head, append([]byte(nil), b.Bytes()...), w.FormDataContentType(), nil
}
