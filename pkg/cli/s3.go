package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/spf13/pflag"

	"nodemend.dev/nodemend/api/v1alpha1"
)

// s3Options are the flags of an upload to S3 that kubectl mend presigns
// with the caller's own AWS credentials (the SDK's standard chain:
// environment, shared config and credentials files with --profile, SSO,
// web identity, the instance's role), as kubectl ekslogs --s3 does. The
// nodes never see a credential: only URLs (PUT) or a policy (POST) signed
// for one key or prefix, expiring after --s3-expires.
type s3Options struct {
	bucket   string
	key      string
	region   string
	profile  string
	endpoint string
	expires  time.Duration
}

func (o *s3Options) addFlags(fl *pflag.FlagSet, what string) {
	fl.StringVar(&o.bucket, "s3", "", "S3 bucket the agent uploads "+what+" to, presigned here with your AWS credentials (as kubectl ekslogs --s3); nothing is downloaded")
	fl.StringVar(&o.key, "key", "", "with --s3: key prefix (a folder) in the bucket")
	fl.StringVar(&o.region, "region", "", "with --s3: the bucket's AWS region (default: the SDK's: $AWS_REGION, the profile's region)")
	fl.StringVar(&o.profile, "profile", "", "with --s3: the AWS shared config profile whose credentials sign the upload (default: $AWS_PROFILE, else the default chain)")
	fl.StringVar(&o.endpoint, "s3-endpoint", "", "with --s3: an S3-compatible endpoint (https://HOST[:PORT], path-style) instead of AWS's")
	fl.DurationVar(&o.expires, "s3-expires", time.Hour, "with --s3: how long the presigned uploads stay valid")
}

func (o *s3Options) enabled() bool { return o.bucket != "" }

func (o *s3Options) validate() error {
	if !o.enabled() {
		if o.key != "" || o.region != "" || o.profile != "" || o.endpoint != "" {
			return errors.New("--key, --region, --profile and --s3-endpoint go with --s3 BUCKET")
		}
		return nil
	}
	if strings.ContainsAny(o.bucket, "/:") {
		return fmt.Errorf("--s3 %q: a bucket name, not a URL or a path (the prefix goes in --key)", o.bucket)
	}
	if o.expires < time.Minute || o.expires > 7*24*time.Hour {
		return fmt.Errorf("--s3-expires %v: between 1m and 7 days (SigV4's limit)", o.expires)
	}
	if o.endpoint != "" {
		u, err := url.Parse(o.endpoint)
		if err != nil || u.Scheme != "https" || u.Host == "" {
			return fmt.Errorf("--s3-endpoint %q: want https://HOST[:PORT] (the agent uploads over HTTPS only)", o.endpoint)
		}
	}
	return nil
}

// prefix is the key prefix with one trailing slash ("" for none).
func (o *s3Options) prefix() string {
	p := strings.Trim(o.key, "/")
	if p == "" {
		return ""
	}
	return p + "/"
}

// s3Presigner presigns uploads into one bucket.
type s3Presigner struct {
	opts    *s3Options
	presign *s3.PresignClient
}

func (o *s3Options) presigner(ctx context.Context) (*s3Presigner, error) {
	var loads []func(*config.LoadOptions) error
	if o.region != "" {
		loads = append(loads, config.WithRegion(o.region))
	}
	if o.profile != "" {
		loads = append(loads, config.WithSharedConfigProfile(o.profile))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loads...)
	if err != nil {
		return nil, fmt.Errorf("loading your AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New("no AWS region: give --region, or set AWS_REGION or the profile's region")
	}
	// Fail here, not on the nodes: presigning needs credentials.
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		return nil, fmt.Errorf("no AWS credentials to presign with (%v): log in, or give --profile", err)
	}
	client := s3.NewFromConfig(cfg, func(so *s3.Options) {
		if o.endpoint != "" {
			so.BaseEndpoint = aws.String(o.endpoint)
			so.UsePathStyle = true
		}
	})
	return &s3Presigner{opts: o, presign: s3.NewPresignClient(client)}, nil
}

// put presigns a PUT of key.
func (p *s3Presigner) put(ctx context.Context, key string) (string, error) {
	req, err := p.presign.PresignPutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(p.opts.bucket), Key: aws.String(key)},
		s3.WithPresignExpires(p.opts.expires))
	if err != nil {
		return "", fmt.Errorf("presigning s3://%s/%s: %w", p.opts.bucket, key, err)
	}
	return req.URL, nil
}

// post presigns one POST policy for every object under prefix, each at
// most maxBytes: the key is prefix + ${filename}, which the agent fills in
// per chunk.
func (p *s3Presigner) post(ctx context.Context, prefix string, maxBytes int64) (*v1alpha1.PostUpload, error) {
	req, err := p.presign.PresignPostObject(ctx, &s3.PutObjectInput{Bucket: aws.String(p.opts.bucket), Key: aws.String(prefix + "${filename}")},
		func(po *s3.PresignPostOptions) {
			po.Expires = p.opts.expires
			po.Conditions = []any{
				[]any{"starts-with", "$key", prefix},
				[]any{"content-length-range", 1, maxBytes},
			}
		})
	if err != nil {
		return nil, fmt.Errorf("presigning a POST policy for s3://%s/%s: %w", p.opts.bucket, prefix, err)
	}
	return &v1alpha1.PostUpload{URL: req.URL, Fields: req.Values}, nil
}

// s3Stamp is the time in keys: one run, one stamp.
func s3Stamp(t time.Time) string { return t.UTC().Format("20060102T150405Z") }

// logsKey is where a node's bundle goes: [PREFIX/]NODE/TIME-logs.tar.gz.
func (o *s3Options) logsKey(node string, t time.Time) string {
	return o.prefix() + node + "/" + s3Stamp(t) + "-logs.tar.gz"
}

// captureKeyPrefix is where a capture's chunks go:
// [PREFIX/]NODE/TIME-capture/ (then the chunk's file name).
func (o *s3Options) captureKeyPrefix(node string, t time.Time) string {
	return o.prefix() + node + "/" + s3Stamp(t) + "-capture/"
}
