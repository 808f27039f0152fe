package imagebuild

import (
	"context"
	"fmt"
	"io"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push uploads img to the registry as tag, with the credentials of the
// Docker config (`docker login`, credential helpers) and the keychain
// rules of go-containerregistry; registries on loopback and private
// addresses are spoken to over plain HTTP. Progress goes to log, one line
// per push. It returns the pushed manifest's digest reference.
func Push(ctx context.Context, tag name.Tag, img v1.Image, log io.Writer, opts ...remote.Option) (name.Digest, error) {
	digest, err := img.Digest()
	if err != nil {
		return name.Digest{}, err
	}
	opts = append([]remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)}, opts...)
	if err := remote.Write(tag, img, opts...); err != nil {
		return name.Digest{}, fmt.Errorf("pushing %s: %w", tag, err)
	}
	ref := tag.Context().Digest(digest.String())
	fmt.Fprintf(log, "pushed %s (%s)\n", tag, ref)
	return ref, nil
}
