// Package fakes3 is an S3-protocol server for tests: gofakes3 (an in-memory
// S3 implementation) behind a gate that verifies what gofakes3 does not.
// gofakes3 v1.2.0 checks no signature at all and takes a browser (POST
// policy) upload's key literally; the gate
//
//   - verifies every presigned request's AWS Signature Version 4 in the
//     query string (X-Amz-Algorithm, -Credential, -Date, -Expires,
//     -SignedHeaders, -Signature) against the canonical request built from
//     what arrived, with the test's secret key, and its expiry;
//   - verifies every POST policy upload: the policy's signature (SigV4 over
//     the base64 policy document), its expiration, and every condition of
//     the document (exact fields, eq, starts-with, content-length-range)
//     against the form as sent, after replacing ${filename} in the key by the
//     file's name as S3 does;
//
// and refuses anything else with 403. What passes goes to gofakes3, which
// stores it. The verification follows AWS's documentation of SigV4
// (sigv4-query-string-auth, sigv4-HTTPPOSTConstructPolicy) and is written
// here, not taken from the SDK under test.
package fakes3

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Server is the gate and its store.
type Server struct {
	// AccessKey and SecretKey are the only credentials accepted.
	AccessKey, SecretKey string
	// Region is the region signatures must be scoped to.
	Region string
	// Now is the server's clock (default time.Now).
	Now func() time.Time

	Backend *s3mem.Backend
	fake    *gofakes3.GoFakeS3

	mu       sync.Mutex
	refusals []string
	accepted int
}

// New returns a server with bucket created.
func New(accessKey, secretKey, region string, buckets ...string) (*Server, error) {
	be := s3mem.New()
	for _, b := range buckets {
		if err := be.CreateBucket(b); err != nil {
			return nil, err
		}
	}
	s := &Server{AccessKey: accessKey, SecretKey: secretKey, Region: region, Now: time.Now, Backend: be}
	s.fake = gofakes3.New(be, gofakes3.WithoutVersioning())
	return s, nil
}

// Refusals are the requests the gate refused, and why.
func (s *Server) Refusals() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.refusals...)
}

// Accepted counts the requests that passed the gate.
func (s *Server) Accepted() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.accepted
}

// Object returns a stored object's content.
func (s *Server) Object(bucket, key string) ([]byte, error) {
	obj, err := s.Backend.GetObject(bucket, key, nil)
	if err != nil {
		return nil, err
	}
	defer obj.Contents.Close()
	return io.ReadAll(obj.Contents)
}

// Keys lists a bucket's keys under prefix.
func (s *Server) Keys(bucket, prefix string) ([]string, error) {
	res, err := s.Backend.ListBucket(bucket, &gofakes3.Prefix{Prefix: prefix, HasPrefix: prefix != ""}, gofakes3.ListBucketPage{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range res.Contents {
		out = append(out, c.Key)
	}
	sort.Strings(out)
	return out, nil
}

func (s *Server) refuse(w http.ResponseWriter, r *http.Request, why string) {
	s.mu.Lock()
	s.refusals = append(s.refusals, r.Method+" "+r.URL.Path+": "+why)
	s.mu.Unlock()
	http.Error(w, "<Error><Code>AccessDenied</Code><Message>"+why+"</Message></Error>", http.StatusForbidden)
}

// ServeHTTP verifies, then hands over to gofakes3.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var err error
	if r.Method == http.MethodPost && strings.HasPrefix(r.Header.Get("Content-Type"), "multipart/form-data") {
		r, err = s.verifyPost(r)
	} else {
		err = s.verifyQuery(r)
	}
	if err != nil {
		s.refuse(w, r, err.Error())
		return
	}
	s.mu.Lock()
	s.accepted++
	s.mu.Unlock()
	s.fake.Server().ServeHTTP(w, r)
}

func hmacSHA256(key []byte, data string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(data))
	return h.Sum(nil)
}

// signingKey derives SigV4's key for a date, region and service.
func (s *Server) signingKey(date, region, service string) []byte {
	k := hmacSHA256([]byte("AWS4"+s.SecretKey), date)
	k = hmacSHA256(k, region)
	k = hmacSHA256(k, service)
	return hmacSHA256(k, "aws4_request")
}

// checkCredential checks a credential scope: KEY/DATE/REGION/s3/aws4_request.
func (s *Server) checkCredential(cred, amzDate string) (date string, err error) {
	parts := strings.Split(cred, "/")
	if len(parts) != 5 || parts[4] != "aws4_request" || parts[3] != "s3" {
		return "", fmt.Errorf("malformed credential %q", cred)
	}
	if parts[0] != s.AccessKey {
		return "", fmt.Errorf("unknown access key %q", parts[0])
	}
	if parts[2] != s.Region {
		return "", fmt.Errorf("credential scoped to region %q, the bucket is in %q", parts[2], s.Region)
	}
	if !strings.HasPrefix(amzDate, parts[1]) {
		return "", fmt.Errorf("credential date %s does not match X-Amz-Date %s", parts[1], amzDate)
	}
	return parts[1], nil
}

// uriEncode is SigV4's URI encoding: unreserved characters stay, the rest
// is %XX (upper case); slashes stay in paths.
func uriEncode(s string, path bool) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z', 'a' <= c && c <= 'z', '0' <= c && c <= '9', c == '-', c == '_', c == '.', c == '~':
			b.WriteByte(c)
		case c == '/' && path:
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// verifyQuery checks a presigned request's query-string signature.
func (s *Server) verifyQuery(r *http.Request) error {
	q := r.URL.Query()
	if q.Get("X-Amz-Algorithm") != "AWS4-HMAC-SHA256" {
		return fmt.Errorf("not a SigV4 presigned request")
	}
	amzDate := q.Get("X-Amz-Date")
	signed, err := time.Parse("20060102T150405Z", amzDate)
	if err != nil {
		return fmt.Errorf("X-Amz-Date %q", amzDate)
	}
	expires, err := strconv.Atoi(q.Get("X-Amz-Expires"))
	if err != nil || expires <= 0 || expires > 7*24*3600 {
		return fmt.Errorf("X-Amz-Expires %q", q.Get("X-Amz-Expires"))
	}
	if now := s.Now(); now.After(signed.Add(time.Duration(expires) * time.Second)) {
		return fmt.Errorf("request has expired")
	}
	date, err := s.checkCredential(q.Get("X-Amz-Credential"), amzDate)
	if err != nil {
		return err
	}
	// Canonical query: every parameter but the signature, sorted.
	var params []string
	for k, vs := range q {
		if k == "X-Amz-Signature" {
			continue
		}
		for _, v := range vs {
			params = append(params, uriEncode(k, false)+"="+uriEncode(v, false))
		}
	}
	sort.Strings(params)
	signedHeaders := strings.Split(q.Get("X-Amz-SignedHeaders"), ";")
	var canonHeaders strings.Builder
	for _, h := range signedHeaders {
		v := r.Header.Get(h)
		if h == "host" {
			v = r.Host
		}
		canonHeaders.WriteString(h + ":" + strings.TrimSpace(v) + "\n")
	}
	creq := strings.Join([]string{r.Method, uriEncode(r.URL.Path, true), strings.Join(params, "&"),
		canonHeaders.String(), strings.Join(signedHeaders, ";"), "UNSIGNED-PAYLOAD"}, "\n")
	sum := sha256.Sum256([]byte(creq))
	scope := date + "/" + s.Region + "/s3/aws4_request"
	sts := "AWS4-HMAC-SHA256\n" + amzDate + "\n" + scope + "\n" + hex.EncodeToString(sum[:])
	want := hex.EncodeToString(hmacSHA256(s.signingKey(date, s.Region, "s3"), sts))
	if !hmac.Equal([]byte(want), []byte(q.Get("X-Amz-Signature"))) {
		return fmt.Errorf("signature does not match")
	}
	return nil
}

// verifyPost checks a POST policy upload and returns the request as
// gofakes3 must see it: the form with ${filename} in the key replaced.
func (s *Server) verifyPost(r *http.Request) (*http.Request, error) {
	const maxForm = 64 << 20
	body, err := io.ReadAll(io.LimitReader(r.Body, maxForm+1))
	if err != nil || len(body) > maxForm {
		return r, fmt.Errorf("unreadable or oversized form")
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if err := r.ParseMultipartForm(maxForm); err != nil {
		return r, fmt.Errorf("malformed form: %v", err)
	}
	form := map[string]string{}
	for k, vs := range r.MultipartForm.Value {
		if len(vs) != 1 {
			return r, fmt.Errorf("field %s given %d times", k, len(vs))
		}
		form[strings.ToLower(k)] = vs[0]
	}
	files := r.MultipartForm.File["file"]
	if len(files) != 1 {
		return r, fmt.Errorf("want one file, got %d", len(files))
	}
	fh := files[0]
	bucket := strings.Trim(r.URL.Path, "/")
	key := strings.ReplaceAll(form["key"], "${filename}", fh.Filename)
	form["key"], form["bucket"] = key, bucket

	amzDate := form["x-amz-date"]
	date, err := s.checkCredential(form["x-amz-credential"], amzDate)
	if err != nil {
		return r, err
	}
	if form["x-amz-algorithm"] != "AWS4-HMAC-SHA256" {
		return r, fmt.Errorf("x-amz-algorithm %q", form["x-amz-algorithm"])
	}
	want := hex.EncodeToString(hmacSHA256(s.signingKey(date, s.Region, "s3"), form["policy"]))
	if !hmac.Equal([]byte(want), []byte(form["x-amz-signature"])) {
		return r, fmt.Errorf("policy signature does not match")
	}
	raw, err := base64.StdEncoding.DecodeString(form["policy"])
	if err != nil {
		return r, fmt.Errorf("policy is not base64")
	}
	var doc struct {
		Expiration string `json:"expiration"`
		Conditions []any  `json:"conditions"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		return r, fmt.Errorf("policy is not JSON")
	}
	exp, err := time.Parse(time.RFC3339, doc.Expiration)
	if err != nil || s.Now().After(exp) {
		return r, fmt.Errorf("policy expired (%s)", doc.Expiration)
	}
	// Every field of the form but the signature, the policy and the file
	// must be named by a condition (S3's rule), and every condition hold.
	covered := map[string]bool{"policy": true, "x-amz-signature": true, "file": true, "bucket": true}
	for _, c := range doc.Conditions {
		switch c := c.(type) {
		case map[string]any:
			for k, v := range c {
				k = strings.ToLower(k)
				covered[k] = true
				if form[k] != fmt.Sprint(v) {
					return r, fmt.Errorf("condition {%q: %q} fails: %q", k, v, form[k])
				}
			}
		case []any:
			if len(c) != 3 {
				return r, fmt.Errorf("malformed condition %v", c)
			}
			op := fmt.Sprint(c[0])
			if op == "content-length-range" {
				lo, _ := c[1].(float64)
				hi, _ := c[2].(float64)
				if fh.Size < int64(lo) || fh.Size > int64(hi) {
					return r, fmt.Errorf("content-length-range %v-%v: the file has %d bytes", lo, hi, fh.Size)
				}
				continue
			}
			field := strings.ToLower(strings.TrimPrefix(fmt.Sprint(c[1]), "$"))
			covered[field] = true
			v := fmt.Sprint(c[2])
			switch op {
			case "eq":
				if form[field] != v {
					return r, fmt.Errorf("condition eq %s %q fails: %q", field, v, form[field])
				}
			case "starts-with":
				if !strings.HasPrefix(form[field], v) {
					return r, fmt.Errorf("condition starts-with %s %q fails: %q", field, v, form[field])
				}
			default:
				return r, fmt.Errorf("unknown condition %q", op)
			}
		}
	}
	for k := range form {
		if !covered[k] && !strings.HasPrefix(k, "x-ignore-") {
			return r, fmt.Errorf("field %s is not in the policy", k)
		}
	}
	// gofakes3 takes the key literally: give it the substituted one.
	return rebuildForm(r, form, fh)
}

func rebuildForm(r *http.Request, form map[string]string, fh *multipart.FileHeader) (*http.Request, error) {
	var b bytes.Buffer
	w := multipart.NewWriter(&b)
	for k, v := range form {
		if k == "bucket" {
			continue
		}
		_ = w.WriteField(k, v)
	}
	part, err := w.CreateFormFile("file", fh.Filename)
	if err != nil {
		return r, err
	}
	f, err := fh.Open()
	if err != nil {
		return r, err
	}
	defer f.Close()
	if _, err := io.Copy(part, f); err != nil {
		return r, err
	}
	_ = w.Close()
	out := r.Clone(r.Context())
	out.Body = io.NopCloser(&b)
	out.ContentLength = int64(b.Len())
	out.Header.Set("Content-Type", w.FormDataContentType())
	out.MultipartForm, out.Form, out.PostForm = nil, nil, nil
	out.URL = &url.URL{Path: r.URL.Path}
	return out, nil
}
