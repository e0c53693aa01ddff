"""S3-compatible object storage: attachment blobs in a bucket (the ``s3`` extra)."""
