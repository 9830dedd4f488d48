//! MySQL/MariaDB storage for tlogd (work in progress).
