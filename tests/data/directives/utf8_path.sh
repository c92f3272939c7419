#!/bin/bash
#RSA_DATA_IN=/gpfs/alice/données/入力
